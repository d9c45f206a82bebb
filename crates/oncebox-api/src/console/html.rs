//! The console's HTML, built with `maud`: a value is text unless marked otherwise, so what the
//! database or a request holds is escaped by its type, never by remembering to. Here: the page
//! frame, badges, links and a small chart drawn as inline SVG on the server — no script
//! anywhere, so the Content-Security-Policy allows none. No page marks raw HTML.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};
use oncebox_core::Status;

/// What [`url_part`] encodes: everything but RFC 3986's unreserved characters.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` percent-encoded as one URL path segment or query value (everything but unreserved
/// characters), so a key holding `/`, `?`, `#` or `%` links to its own page.
pub(crate) fn url_part(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}

/// The link to intent `key`'s page.
pub(crate) fn intent_href(key: &str) -> String {
    format!("/console/intents/{}", url_part(key))
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}

/// A duration in seconds as people read it: `42 s`, `5 min`, `3 h 10 min`, `2 d 4 h`.
pub(crate) fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// A timestamp in UTC, to the second.
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How old `t` is now, as [`age`] says it.
pub(crate) fn ago(t: DateTime<Utc>) -> String {
    let secs = (Utc::now() - t).num_milliseconds() as f64 / 1000.0;
    format!("{} ago", age(secs))
}

/// A status as a badge (its class, `s-STATUS`, colours it): `(Badge(status))` in a template.
pub(crate) struct Badge(pub(crate) Status);

impl maud::Render for Badge {
    fn render(&self) -> Markup {
        let status = self.0.as_str();
        html! { span class={ "badge s-" (status) } { (status) } }
    }
}

/// A table's head: one column header per name.
pub(crate) fn columns(names: &[&str]) -> Markup {
    html! { thead { tr { @for name in names { th scope="col" { (name) } } } } }
}

/// Which navigation entry a page belongs to. The entries the frame shows, in order, are
/// [`NAVIGATION`]; each one's path (where the router mounts its page) and label are here, so a
/// page in the navigation is one variant, its two arms and its line in [`NAVIGATION`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Approvals,
    Overview,
    Attention,
    Search,
    None,
}

/// The navigation, in the order the frame shows it.
pub(crate) const NAVIGATION: [Nav; 3] = [Nav::Approvals, Nav::Overview, Nav::Attention];

impl Nav {
    /// The path of the entry's page.
    pub(crate) const fn path(self) -> &'static str {
        match self {
            Nav::Approvals => "/console/approvals",
            Nav::Overview => "/console",
            Nav::Attention => "/console/attention",
            Nav::Search => "/console/search",
            Nav::None => "",
        }
    }

    /// The entry's label in the navigation.
    const fn label(self) -> &'static str {
        match self {
            Nav::Approvals => "Awaiting approval",
            Nav::Overview => "Overview",
            Nav::Attention => "Needs a person",
            Nav::Search => "Search",
            Nav::None => "",
        }
    }
}

/// Who is logged in, as the frame shows it, and the CSRF token of the logout form.
pub(crate) struct Frame<'a> {
    pub(crate) tenant: &'a str,
    /// The principal, as recorded in the audit log.
    pub(crate) principal: String,
    /// How people know them: a token's label or a person's e-mail, if any.
    pub(crate) label: Option<&'a str>,
    pub(crate) csrf: &'a str,
}

/// A whole page: the frame (navigation, search, who, logout) around `body`.
pub(crate) fn page(title: &str, nav: Nav, frame: Option<&Frame<'_>>, body: Markup) -> String {
    let item = |n: Nav| {
        html! {
            @if n == nav {
                a href=(n.path()) aria-current="page" { (n.label()) }
            } @else {
                a href=(n.path()) { (n.label()) }
            }
        }
    };
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · oncebox console" }
                link rel="stylesheet" href="/console/console.css";
                link rel="icon" href="data:,";
            }
            body {
                header {
                    a.brand href="/console" { "oncebox" }
                    @if let Some(f) = frame {
                        nav {
                            @for n in NAVIGATION { (item(n)) }
                        }
                        form.search method="get" action=(Nav::Search.path()) {
                            input type="search" name="q" placeholder="Key or business reference"
                                aria-label="Search by key or business reference" required;
                            button type="submit" { "Search" }
                        }
                        div.who {
                            "tenant " b { (f.tenant) } " · "
                            span.principal title=(f.principal) {
                                (f.label.unwrap_or(&f.principal))
                            }
                            form method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(f.csrf);
                                button.link type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    page.into_string()
}

/// One bar of [`bar_chart`]: its label and its stacked parts (each with a CSS class).
pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) parts: Vec<(&'static str, u64)>,
}

/// A stacked bar chart as inline SVG (no script, no inline style: classes colour it), with a
/// title and a text equivalent for screen readers. Every SVG element is closed explicitly: in
/// HTML, a `<line>` left open would hold its siblings.
pub(crate) fn bar_chart(title: &str, bars: &[Bar], legend: &[(&'static str, &str)]) -> Markup {
    const W: f64 = 720.0;
    const H: f64 = 180.0;
    const LEFT: f64 = 44.0;
    const BOTTOM: f64 = 22.0;
    let peak = bars
        .iter()
        .map(|b| b.parts.iter().map(|(_, n)| n).sum::<u64>())
        .max()
        .unwrap_or(0);
    // The axis's top: even, so that the middle gridline is a whole number.
    let max = peak.max(1).div_ceil(2) * 2;
    let total: u64 = bars
        .iter()
        .flat_map(|b| b.parts.iter().map(|(_, n)| n))
        .sum();
    let slot = (W - LEFT) / bars.len().max(1) as f64;
    let plot = H - BOTTOM - 8.0;
    let at = |v: f64| format!("{v:.1}");
    html! {
        figure.chart {
            svg viewBox={ "0 0 " (W) " " (H) } role="img"
                aria-label={ (title) ": " (total) " in all, at most " (peak) " in one minute" } {
                // Axis: 0, half and the maximum.
                @for (frac, label) in [(0.0, 0), (0.5, max / 2), (1.0, max)] {
                    @let y = 8.0 + plot * (1.0 - frac);
                    line.grid x1=(LEFT) x2=(W) y1=(at(y)) y2=(at(y)) {}
                    text.axis x=(at(LEFT - 6.0)) y=(at(y + 4.0)) text-anchor="end" { (label) }
                }
                @for (i, bar) in bars.iter().enumerate() {
                    @let x = LEFT + slot * i as f64 + 1.0;
                    @for (class, n, y, h) in stacked(bar, plot, max) {
                        rect class=(class) x=(at(x)) y=(at(y)) width=(at((slot - 2.0).max(1.0)))
                            height=(at(h)) {
                            title { (bar.label) ": " (n) }
                        }
                    }
                    @let last = i + 1 == bars.len();
                    @if i % 10 == 0 || last {
                        @let (x_at, anchor) = match (i, last) {
                            (0, _) => (x, "start"),
                            (_, true) => (x + slot - 2.0, "end"),
                            _ => (x + slot / 2.0, "middle"),
                        };
                        text.axis x=(at(x_at)) y=(at(H - 6.0)) text-anchor=(anchor) {
                            (bar.label)
                        }
                    }
                }
            }
            figcaption {
                (title) " "
                @for (class, label) in legend {
                    span class={ "key " (class) } {} (label) " "
                }
            }
        }
    }
}

/// The parts of `bar` drawn bottom up: class, count, top and height, for a plot `plot` high
/// whose top is `max`.
fn stacked(bar: &Bar, plot: f64, max: u64) -> Vec<(&'static str, u64, f64, f64)> {
    let mut y = 8.0 + plot;
    let mut out = Vec::new();
    for (class, n) in &bar.parts {
        if *n == 0 {
            continue;
        }
        let h = plot * *n as f64 / max as f64;
        y -= h;
        out.push((*class, *n, y, h));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_by_its_type_and_urls_keep_odd_keys_whole() {
        let text = "<script>alert('x')</script> & \"q\"";
        assert_eq!(
            html! { p title=(text) { (text) } }.into_string(),
            "<p title=\"&lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;q&quot;\">\
             &lt;script&gt;alert('x')&lt;/script&gt; &amp; &quot;q&quot;</p>"
        );
        assert_eq!(
            html! { (Badge(Status::NeedsReview)) }.into_string(),
            "<span class=\"badge s-needs_review\">needs_review</span>"
        );
        assert_eq!(url_part("a/b?c#d%e f"), "a%2Fb%3Fc%23d%25e%20f");
        assert_eq!(
            intent_href("order-1.x_y~z"),
            "/console/intents/order-1.x_y~z"
        );
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(age(5.2), "5 s");
        assert_eq!(age(600.0), "10 min");
        assert_eq!(age(3.0 * 3600.0 + 600.0), "3 h 10 min");
        assert_eq!(age(2.0 * 86_400.0 + 4.0 * 3600.0), "2 d 4 h");
    }

    #[test]
    fn the_chart_scales_to_its_largest_bar_and_escapes_labels() {
        let bars = vec![
            Bar {
                label: "<b>".into(),
                parts: vec![("ok", 3), ("bad", 1)],
            },
            Bar {
                label: "now".into(),
                parts: vec![("ok", 0)],
            },
        ];
        let svg = bar_chart("Done", &bars, &[("ok", "succeeded")]).into_string();
        assert!(svg.contains("4 in all, at most 4 in one minute"), "{svg}");
        assert!(svg.contains("&lt;b&gt;: 3"), "{svg}");
        assert!(!svg.contains("<b>"), "{svg}");
        assert!(!svg.contains("style="), "no inline style: {svg}");
        assert!(svg.contains("</line>"), "SVG elements are closed: {svg}");
    }
}
