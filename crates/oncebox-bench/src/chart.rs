//! The latency chart: milliseconds against offered load, both on log scales, drawn to a PNG with
//! plotters' bitmap backend (no browser). Text is rendered from a TTF file read at run time.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A line of the chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Legend text.
    pub(crate) label: String,
    /// (offered intents/s, milliseconds), in offered order.
    pub(crate) points: Vec<(f64, f64)>,
    /// At saturation: (achieved intents/s, milliseconds), drawn as a hollow square off the line.
    pub(crate) saturation: Option<(f64, f64)>,
    /// Worker processes: picks the colour.
    pub(crate) workers: u32,
    /// A tail percentile: drawn thinner, with triangles instead of circles.
    pub(crate) tail: bool,
}

/// What the chart shows.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// The caption.
    pub(crate) title: String,
    /// The lines.
    pub(crate) series: Vec<Series>,
    /// Goals, drawn as grey crosses: (offered/s, percentile label, milliseconds).
    pub(crate) goals: Vec<(f64, &'static str, f64)>,
    /// What the x axis measures.
    pub(crate) x_desc: &'static str,
    /// What the y axis measures.
    pub(crate) y_desc: &'static str,
}

const WIDTH: u32 = 1400;
const HEIGHT: u32 = 680;
/// The strip right of the plot that holds the legend, so that no line ever runs under it.
const LEGEND_WIDTH: u32 = 330;
/// The height of one legend entry.
const LEGEND_ROW: i32 = 26;

fn colour(workers: u32) -> RGBColor {
    match workers {
        1 => RGBColor(31, 119, 180),
        2 => RGBColor(214, 39, 40),
        3 => RGBColor(44, 160, 44),
        4 => RGBColor(148, 103, 189),
        _ => RGBColor(255, 127, 14),
    }
}

/// The ranges of `chart`'s axes, after registering `font` and creating `path`'s directory.
fn prepare(chart: &Chart, path: &Path, font: Vec<u8>) -> anyhow::Result<((f64, f64), (f64, f64))> {
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied().chain(s.saturation))
        .chain(chart.goals.iter().map(|g| (g.0, g.2)))
        .filter(|(x, y)| *x > 0.0 && *y > 0.0 && y.is_finite())
        .collect();
    anyhow::ensure!(!all.is_empty(), "nothing to draw");
    // The font lives as long as the process: plotters keeps a 'static reference to it.
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| anyhow::anyhow!("the font file is not a TrueType or OpenType font"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    Ok((
        bounds(all.iter().map(|p| p.0)),
        bounds(all.iter().map(|p| p.1)),
    ))
}

/// How an entry of the legend is drawn.
#[derive(Debug, Clone, Copy)]
enum Key {
    /// A series: its line and its marker.
    Line { colour: RGBColor, tail: bool },
    /// The hollow square of a saturation point.
    Saturation,
    /// The grey cross of a goal.
    Goal,
}

/// The legend's entries, in the order the chart draws them.
fn keys(chart: &Chart) -> Vec<(String, Key)> {
    let lines = chart.series.iter().map(|s| {
        let key = Key::Line {
            colour: colour(s.workers),
            tail: s.tail,
        };
        (s.label.clone(), key)
    });
    let saturation = chart
        .series
        .iter()
        .any(|s| s.saturation.is_some())
        .then(|| {
            (
                "saturation (at the rate reached)".to_owned(),
                Key::Saturation,
            )
        });
    let goals = (!chart.goals.is_empty()).then(|| ("goal: p50 and p99".to_owned(), Key::Goal));
    lines.chain(saturation).chain(goals).collect()
}

/// Draws the legend of `chart` into `area`, a strip of its own beside the plot: a framed list,
/// one entry per row.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let keys = keys(chart);
    let (top, left) = (40, 8);
    let width = LEGEND_WIDTH as i32 - 2 * left;
    let height = LEGEND_ROW * keys.len() as i32 + 12;
    area.draw(&Rectangle::new(
        [(left, top), (left + width, top + height)],
        BLACK.stroke_width(1),
    ))?;
    let text = ("sans-serif", 15).into_font().color(&BLACK);
    for (i, (label, key)) in keys.iter().enumerate() {
        let y = top + 6 + LEGEND_ROW * i as i32 + LEGEND_ROW / 2;
        let (x0, x1) = (left + 10, left + 40);
        let mid = (x0 + x1) / 2;
        match *key {
            Key::Line { colour, tail } => {
                let width = if tail { 1 } else { 3 };
                area.draw(&PathElement::new(
                    [(x0, y), (x1, y)],
                    colour.stroke_width(width),
                ))?;
                if tail {
                    area.draw(&TriangleMarker::new((mid, y), 6, colour.filled()))?;
                } else {
                    area.draw(&Circle::new((mid, y), 5, colour.filled()))?;
                }
            }
            Key::Saturation => {
                let style = RGBColor(60, 60, 60).stroke_width(2);
                area.draw(&Rectangle::new([(mid - 6, y - 6), (mid + 6, y + 6)], style))?;
            }
            Key::Goal => {
                area.draw(&Cross::new(
                    (mid, y),
                    6,
                    RGBColor(90, 90, 90).stroke_width(2),
                ))?;
            }
        }
        area.draw(&Text::new(
            label.as_str(),
            (x1 + 10, y),
            text.pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// Draws `chart` into the PNG at `path` (its directory is created), with `font` (a TTF file's
/// bytes) for every text.
///
/// # Errors
/// A font plotters cannot read, a directory or file that cannot be written, or an empty chart.
pub(crate) fn draw(chart: &Chart, path: &Path, font: Vec<u8>) -> anyhow::Result<()> {
    let ((x_min, x_max), (y_min, y_max)) = prepare(chart, path, font)?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| anyhow::anyhow!("drawing the chart: {e:?}");
    root.fill(&WHITE).map_err(e)?;
    let below_title = root.titled(&chart.title, ("sans-serif", 22)).map_err(e)?;
    let (plot, legend) = below_title.split_horizontally(WIDTH - LEGEND_WIDTH);
    let mut ctx = ChartBuilder::on(&plot)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x_min / 1.5..x_max * 1.5).log_scale(),
            (y_min / 1.5..y_max * 1.5).log_scale(),
        )
        .map_err(e)?;
    ctx.configure_mesh()
        .x_desc(chart.x_desc)
        .y_desc(chart.y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| trim(*y))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    for s in &chart.series {
        let c = colour(s.workers);
        let width = if s.tail { 1 } else { 3 };
        ctx.draw_series(LineSeries::new(s.points.clone(), c.stroke_width(width)))
            .map_err(e)?;
        if s.tail {
            ctx.draw_series(
                s.points
                    .iter()
                    .map(|&p| TriangleMarker::new(p, 6, c.filled())),
            )
            .map_err(e)?;
        } else {
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 5, c.filled())))
                .map_err(e)?;
        }
        if let Some(p) = s.saturation {
            let style = c.stroke_width(2);
            ctx.draw_series(std::iter::once(
                EmptyElement::at(p) + Rectangle::new([(-6, -6), (6, 6)], style),
            ))
            .map_err(e)?;
        }
    }
    if !chart.goals.is_empty() {
        let grey = RGBColor(90, 90, 90);
        ctx.draw_series(
            chart
                .goals
                .iter()
                .map(|&(x, _, y)| Cross::new((x, y), 7, grey.stroke_width(2))),
        )
        .map_err(e)?;
    }
    draw_legend(&legend, chart).map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// A tick label without trailing zeros: 0.5, 1, 20.
fn trim(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_a_png_of_the_set_size_and_an_empty_one_is_refused() {
        let Ok(font) = std::fs::read(crate::DEFAULT_FONT) else {
            panic!(
                "{} is missing: apt-get install fonts-dejavu-core",
                crate::DEFAULT_FONT
            );
        };
        let dir = std::env::temp_dir().join(format!("oncebox-chart-{}", std::process::id()));
        let path = dir.join("latency.png");
        let chart = Chart {
            title: "test".into(),
            x_desc: "x",
            y_desc: "y",
            series: vec![
                Series {
                    label: "p50, 1 worker".into(),
                    points: vec![(10.0, 1.0), (100.0, 1.2), (1000.0, 2.5)],
                    saturation: Some((4000.0, 40.0)),
                    workers: 1,
                    tail: false,
                },
                Series {
                    label: "p99, 2 workers".into(),
                    points: vec![(10.0, 3.0), (100.0, 4.0), (1000.0, 12.0)],
                    saturation: None,
                    workers: 2,
                    tail: true,
                },
            ],
            goals: crate::latency::GOALS.to_vec(),
        };
        draw(&chart, &path, font).expect("drawn");
        let bytes = std::fs::read(&path).expect("written");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
        // IHDR: width and height, big-endian, at bytes 16..24.
        let w = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes"));
        let h = u32::from_be_bytes(bytes[20..24].try_into().expect("4 bytes"));
        assert_eq!((w, h), (WIDTH, HEIGHT));
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert!(
            draw(
                &Chart {
                    series: vec![],
                    goals: vec![],
                    ..chart
                },
                &path,
                vec![0; 4]
            )
            .is_err()
        );
    }
}
