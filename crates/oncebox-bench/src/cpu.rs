//! CPU use from Linux's /proc: the Postgres server's processes, this benchmark's own process
//! (the worker and the receiver it runs in-process), and the whole machine's idle share, read
//! before and after a measured stretch. `None` where there is no /proc.

/// Clock ticks per second in /proc: 100 on every Linux this runs on (USER_HZ).
const TICKS: f64 = 100.0;

/// Ticks of a /proc/PID/stat line: the process's own user + system ticks, and those of its
/// children it has waited for (reaped); with the name in its parentheses.
struct StatTicks<'a> {
    name: &'a str,
    own: u64,
    children: u64,
}

/// Reads a /proc/PID/stat line; `None` when it is not one.
fn stat_ticks(stat: &str) -> Option<StatTicks<'_>> {
    // pid (comm) state … utime stime cutime cstime: fields 14 to 17, counted after the ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let mut next = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let own = next() + next();
    Some(StatTicks {
        name,
        own,
        children: next() + next(),
    })
}

/// CPU seconds (user + system) used so far by the processes named `postgres` — the server and
/// its backends — and by those of them that have exited: the server counts each backend it
/// reaps among its children, so the sum does not fall when a connection closes.
fn postgres_cpu_seconds() -> Option<f64> {
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        match stat_ticks(&stat) {
            Some(t) if t.name == "postgres" => ticks += t.own + t.children,
            _ => continue,
        }
    }
    Some(ticks as f64 / TICKS)
}

/// CPU seconds (user + system, all threads) used so far by this process, not its children
/// (pgbench, psql, worker processes).
fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    Some(stat_ticks(&stat)?.own as f64 / TICKS)
}

/// A reading of the machine's and Postgres's CPU counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuReading {
    /// All CPUs' ticks so far, idle and I/O wait included.
    total: u64,
    /// Their idle and I/O-wait ticks.
    idle: u64,
    /// Postgres's CPU seconds so far.
    postgres: f64,
    /// This process's CPU seconds so far.
    own: f64,
}

/// CPU used between two readings.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct CpuUse {
    /// The share of the machine's CPU time that was idle (0–1).
    pub(crate) idle_share: f64,
    /// Postgres's CPU time per unit of work, in milliseconds.
    pub(crate) postgres_ms_per_unit: f64,
    /// This process's CPU time per unit of work, in milliseconds: the worker, and whatever
    /// else the benchmark runs in-process (the receiver, submitters).
    pub(crate) process_ms_per_unit: f64,
}

impl CpuReading {
    /// Reads the counters now.
    pub(crate) fn now() -> Option<CpuReading> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal …
        Some(CpuReading {
            total: ticks.iter().take(8).sum(),
            idle: ticks.get(3)? + ticks.get(4)?,
            postgres: postgres_cpu_seconds()?,
            own: own_cpu_seconds()?,
        })
    }

    /// What was used from this reading to `later`, over `units` of work.
    pub(crate) fn until(self, later: CpuReading, units: usize) -> CpuUse {
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        let per_unit = |seconds: f64| seconds * 1000.0 / units.max(1) as f64;
        CpuUse {
            idle_share: later.idle.saturating_sub(self.idle) as f64 / total,
            postgres_ms_per_unit: per_unit(later.postgres - self.postgres),
            process_ms_per_unit: per_unit(later.own - self.own),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_between_readings_is_the_idle_share_and_postgres_time_per_unit() {
        let a = CpuReading {
            total: 1_000,
            idle: 400,
            postgres: 2.0,
            own: 1.0,
        };
        let b = CpuReading {
            total: 1_200,
            idle: 450,
            postgres: 2.5,
            own: 1.25,
        };
        let used = a.until(b, 1_000);
        assert!((used.idle_share - 0.25).abs() < 1e-9, "{used:?}");
        assert!((used.postgres_ms_per_unit - 0.5).abs() < 1e-9, "{used:?}");
        assert!((used.process_ms_per_unit - 0.25).abs() < 1e-9, "{used:?}");
    }

    #[test]
    fn a_stat_line_gives_its_name_and_user_plus_system_ticks() {
        // A name with spaces and a ')' in it, as comm may be.
        let line = "42 (post gres)) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 30 4 20 0 1 0 9";
        let t = stat_ticks(line).expect("a stat line");
        assert_eq!((t.name, t.own, t.children), ("post gres)", 12, 34));
        assert!(stat_ticks("garbage").is_none());
    }

    /// A backend that worked and then exited stays counted: the server's reaped children.
    #[test]
    fn postgres_time_does_not_fall_when_a_backend_exits() {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let before = CpuReading::now().expect("/proc on Linux");
        // About half a second of one backend's CPU, then its connection closes.
        let out = std::process::Command::new("psql")
            .args(["-X", "-At", &url, "-c"])
            .arg("SELECT pg_backend_pid(), count(*) FROM generate_series(1, 5000000)")
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let pid = stdout.split('|').next().expect("a pid").trim().to_owned();
        // Gone from /proc once the server has reaped it.
        let gone = std::path::Path::new("/proc").join(&pid);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while gone.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "backend {pid} still there"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let after = CpuReading::now().expect("/proc on Linux");
        assert!(
            after.postgres >= before.postgres + 0.1,
            "{} s before, {} s after the backend exited",
            before.postgres,
            after.postgres
        );
    }

    #[test]
    fn this_machine_s_counters_read_and_only_grow() {
        let a = CpuReading::now().expect("/proc on Linux");
        let b = CpuReading::now().expect("/proc on Linux");
        assert!(a.idle <= a.total && b.total >= a.total && b.postgres >= a.postgres);
        assert!(b.own >= a.own);
    }
}
