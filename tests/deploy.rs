//! The deployment files are checked, not just written: the Dockerfile passes hadolint, every
//! Kubernetes manifest validates against the Kubernetes schemas (kubernetes-validate, strict),
//! the kustomization names every manifest, and every flag a manifest, compose service or systemd
//! unit passes to `oncebox` is one the binary accepts. Grace periods outlast the worker's
//! `--grace`, so a scaled-down worker releases its leases before it is killed.
//!
//! The Python tools come from `scripts/pytools.sh` (run by `scripts/test.sh`): see
//! `support::pytools`.

mod support;
use support::{pytools, run_ok};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_oncebox");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every YAML document in `file`, as JSON.
fn yaml_docs(file: &Path) -> Vec<Value> {
    let (ok, text) = run(Command::new(pytools().join("python"))
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]))",
        ])
        .arg(file));
    assert!(ok, "{} is not YAML: {text}", file.display());
    serde_json::from_str(&text).expect("json")
}

/// The `--flag` names in `args`, checked against `oncebox <subcommand> --help`.
fn assert_flags_exist(args: &[String], whence: &str) {
    let sub = args.first().expect("a subcommand").clone();
    let (ok, help) = run(Command::new(BIN).args([&sub, "--help"]));
    assert!(ok, "{whence}: `oncebox {sub}` is not a command: {help}");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let name = flag.split('=').next().unwrap_or_default();
        assert!(
            help.contains(&format!("{name} ")) || help.contains(&format!("{name}\n")),
            "{whence}: `oncebox {sub}` has no flag {name}"
        );
    }
}

/// The value of `--flag=VALUE` or `--flag VALUE` in `args`.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix(&format!("{flag}="))
            .map(str::to_owned)
            .or_else(|| (a == flag).then(|| args.get(i + 1).cloned()).flatten())
    })
}

fn seconds(text: &str) -> u64 {
    oncebox_core::duration::parse_duration(text)
        .unwrap_or_else(|e| panic!("{text}: {e}"))
        .as_secs()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_dockerfile_passes_hadolint_and_builds_what_it_copies() {
    let dockerfile = root().join("deploy/Dockerfile");
    let (ok, text) = run(Command::new(pytools().join("hadolint")).arg(&dockerfile));
    assert!(ok, "hadolint found problems:\n{text}");
    // Every path the build copies is let through by .dockerignore, which excludes the rest.
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    let allowed: Vec<&str> = ignore
        .lines()
        .filter_map(|l| l.strip_prefix('!'))
        .map(|l| l.trim_end_matches('/'))
        .collect();
    let docker = std::fs::read_to_string(&dockerfile).expect("Dockerfile");
    let copies: Vec<&str> = docker
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
        .flat_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            parts[1..parts.len() - 1].to_vec()
        })
        .collect();
    assert!(copies.contains(&"crates"), "{copies:?}");
    for src in copies {
        assert!(allowed.contains(&src), ".dockerignore excludes {src}");
        assert!(
            root().join(src).exists(),
            "the Dockerfile copies {src}, which does not exist"
        );
    }
    assert!(docker.contains("USER 65532"), "the image runs as non-root");
    assert!(docker.contains("ENTRYPOINT [\"/usr/local/bin/oncebox\"]"));
}

#[test]
fn kubernetes_manifests_validate_against_the_kubernetes_schemas() {
    let dir = root().join("deploy/k8s");
    let mut manifests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/k8s")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    manifests.sort();
    assert!(manifests.len() >= 6, "{manifests:?}");
    // The oldest supported Kubernetes and the newest schema the package ships.
    for version in ["1.30.0", "1.37.0"] {
        let (ok, text) = run(Command::new(pytools().join("kubernetes-validate"))
            .args(["--strict", "--kubernetes-version", version])
            .args(&manifests));
        assert!(ok, "kubernetes-validate {version}:\n{text}");
        assert!(!text.contains("ERROR"), "{text}");
    }

    // The kustomization names every manifest but the Secret template.
    let kustomization = &yaml_docs(&dir.join("kustomization.yaml"))[0];
    let listed: BTreeSet<String> = strings(&kustomization["resources"]).into_iter().collect();
    let present: BTreeSet<String> = manifests
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .filter(|n| n != "secret.example.yaml")
        .collect();
    assert_eq!(listed, present, "kustomization.yaml resources");
    // The rendered kustomization validates too (kubectl is one of the pinned test tools).
    let out = run_ok(
        Command::new(pytools().join("kubectl"))
            .arg("kustomize")
            .arg(&dir),
    );
    let rendered = std::env::temp_dir().join(format!("oncebox-k8s-{}.yaml", std::process::id()));
    std::fs::write(&rendered, &out.stdout).expect("rendered");
    let (ok, text) = run(Command::new(pytools().join("kubernetes-validate"))
        .args(["--strict"])
        .arg(&rendered));
    let _ = std::fs::remove_file(&rendered);
    assert!(ok, "kubectl kustomize output:\n{text}");

    let mut docs = Vec::new();
    for m in &manifests {
        docs.extend(yaml_docs(m));
    }
    let find = |kind: &str, name: &str| -> &Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };

    // The configuration in the ConfigMap is one oncebox accepts.
    let toml = find("ConfigMap", "oncebox-config")["data"]["oncebox.toml"]
        .as_str()
        .expect("oncebox.toml");
    oncebox_core::config::Config::from_toml(toml).expect("the ConfigMap's oncebox.toml is valid");

    // Every container's arguments are flags the binary has; probes hit what it serves.
    for d in docs
        .iter()
        .filter(|d| ["Deployment", "Job"].contains(&d["kind"].as_str().unwrap_or_default()))
    {
        let pod = &d["spec"]["template"]["spec"];
        for c in pod["containers"].as_array().expect("containers") {
            let args = strings(&c["args"]);
            assert_flags_exist(&args, &format!("{} {}", d["kind"], d["metadata"]["name"]));
            for probe in ["livenessProbe", "readinessProbe"] {
                if d["kind"] == "Deployment" {
                    let path = c[probe]["httpGet"]["path"].as_str().unwrap_or_default();
                    assert!(["/healthz", "/readyz"].contains(&path), "{probe} {path}");
                }
            }
        }
    }
    let worker = find("Deployment", "oncebox-worker");
    let pod = &worker["spec"]["template"]["spec"];
    let args = strings(&pod["containers"][0]["args"]);
    let grace = seconds(&flag_value(&args, "--grace").unwrap_or_else(|| "10s".into()));
    let termination = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        termination >= grace + 10,
        "terminationGracePeriodSeconds {termination} must outlast --grace {grace} s by 10 s"
    );
    assert_eq!(
        pod["containers"][0]["readinessProbe"]["httpGet"]["path"], "/readyz",
        "worker readiness is the database probe"
    );
    assert_eq!(
        worker["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(
        find("HorizontalPodAutoscaler", "oncebox-worker")["spec"]["scaleTargetRef"]["name"],
        "oncebox-worker"
    );
    assert_eq!(
        find("PodDisruptionBudget", "oncebox-worker")["spec"]["selector"]["matchLabels"],
        worker["spec"]["selector"]["matchLabels"]
    );
    let secret = &yaml_docs(&dir.join("secret.example.yaml"))[0];
    for var in ["DATABASE_URL", "AMQP_URL"] {
        assert!(
            secret["stringData"][var].is_string(),
            "the Secret template has {var}"
        );
    }
}

#[test]
fn compose_runs_three_workers_with_flags_the_binary_has() {
    let file = root().join("deploy/compose.yaml");
    let compose = &yaml_docs(&file)[0];
    let services = &compose["services"];
    for s in ["postgres", "rabbitmq", "migrate", "api", "worker"] {
        assert!(services[s].is_object(), "compose service {s}");
    }
    assert_eq!(services["worker"]["deploy"]["replicas"], 3);
    for (name, s) in services.as_object().expect("services") {
        if s["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("oncebox"))
        {
            assert_flags_exist(&strings(&s["command"]), &format!("compose service {name}"));
        }
    }
    let args = strings(&services["worker"]["command"]);
    let grace = seconds(&flag_value(&args, "--grace").unwrap_or_else(|| "10s".into()));
    let stop = seconds(
        services["worker"]["stop_grace_period"]
            .as_str()
            .expect("stop_grace_period"),
    );
    assert!(
        stop > grace,
        "stop_grace_period {stop} s must outlast --grace {grace} s"
    );
    // The mounted configuration and definitions exist and are valid.
    let toml = std::fs::read_to_string(root().join("deploy/compose/oncebox.toml")).expect("toml");
    oncebox_core::config::Config::from_toml(&toml).expect("deploy/compose/oncebox.toml is valid");
    let defs: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/rabbitmq/definitions.json")).expect("defs"),
    )
    .expect("definitions.json");
    assert!(defs["queues"].is_array());
}

#[test]
fn systemd_units_verify_and_outlast_the_worker_grace() {
    let dir = root().join("deploy/systemd");
    let units: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/systemd")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    assert_eq!(units.len(), 3, "{units:?}");
    let scratch = std::env::temp_dir().join(format!("oncebox-systemd-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    for unit in &units {
        let text = std::fs::read_to_string(unit).expect("unit");
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/oncebox "))
            .expect("ExecStart runs oncebox");
        let args: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
        assert_flags_exist(&args, &unit.display().to_string());
        if let Some(grace) = flag_value(&args, "--grace") {
            let stop = text
                .lines()
                .find_map(|l| l.strip_prefix("TimeoutStopSec="))
                .expect("TimeoutStopSec");
            assert!(
                seconds(stop) > seconds(&grace),
                "{}: TimeoutStopSec",
                unit.display()
            );
        }
        // systemd-analyze wants the executable to exist: point it at the built binary.
        std::fs::write(
            scratch.join(unit.file_name().expect("name")),
            text.replace("/usr/local/bin/oncebox", BIN),
        )
        .expect("copy");
    }
    // systemd-analyze is required, not skipped: scripts/test-tools.sh installs Debian's systemd
    // package when it is missing.
    let mut cmd = Command::new("systemd-analyze");
    cmd.args(["verify", "--man=no"]);
    for unit in &units {
        cmd.arg(scratch.join(unit.file_name().expect("name")));
    }
    let (ok, text) = run(&mut cmd);
    // Unknown keys are only warnings to systemd: any output is a finding here.
    let findings: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(ok && findings.is_empty(), "systemd-analyze verify:\n{text}");
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The variables a configuration reads (`${NAME}` in headers and AMQP URLs, `AMQP_URL` for an
/// AMQP destination without its own URL, `DATABASE_URL` always) are all set by the environment
/// it ships with, or the worker would stop at start-up and its unit restart in a loop: an
/// outside check found the systemd example environment lacking the example config's
/// `BILLING_TOKEN`.
fn assert_environment_suffices(config: &str, env: &BTreeMap<String, String>, whence: &str) {
    use oncebox_core::config::{Config, Destination};
    use oncebox_core::redact::{RedactionKeys, needs_key};
    let mut config = Config::from_toml(config).unwrap_or_else(|e| panic!("{whence}: {e}"));
    if config.actions.values().any(|a| needs_key(&a.redact)) {
        let keys = env.get(RedactionKeys::ENV).unwrap_or_else(|| {
            panic!(
                "{whence}: a rule hashes, and {} is not set",
                RedactionKeys::ENV
            )
        });
        RedactionKeys::parse(keys).unwrap_or_else(|e| panic!("{whence}: {e}"));
    }
    config
        .resolve_env(|name| env.get(name).cloned())
        .unwrap_or_else(|e| panic!("{whence}: {e}"));
    assert!(env.contains_key("DATABASE_URL"), "{whence}: DATABASE_URL");
    for (name, dest) in &config.destinations {
        if let Destination::Amqp(a) = dest
            && a.amqp_url.is_none()
        {
            assert!(
                env.contains_key("AMQP_URL"),
                "{whence}: AMQP_URL for {name}"
            );
        }
    }
}

#[test]
fn the_example_environments_set_every_variable_their_configs_read() {
    let deploy = root().join("deploy");
    let read = |p: &str| std::fs::read_to_string(deploy.join(p)).expect(p);
    let systemd: BTreeMap<String, String> = read("systemd/oncebox.env.example")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    assert_environment_suffices(
        &read("oncebox.example.toml"),
        &systemd,
        "systemd: oncebox.example.toml with oncebox.env.example",
    );
    let configmap = &yaml_docs(&deploy.join("k8s/configmap.yaml"))[0];
    let secret = &yaml_docs(&deploy.join("k8s/secret.example.yaml"))[0];
    let k8s: BTreeMap<String, String> = secret["stringData"]
        .as_object()
        .expect("stringData")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_environment_suffices(
        configmap["data"]["oncebox.toml"]
            .as_str()
            .expect("oncebox.toml"),
        &k8s,
        "k8s: configmap.yaml with secret.example.yaml",
    );
    let compose = &yaml_docs(&deploy.join("compose.yaml"))[0];
    let env: BTreeMap<String, String> = compose["x-oncebox"]["environment"]
        .as_object()
        .expect("x-oncebox environment")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_environment_suffices(
        &read("compose/oncebox.toml"),
        &env,
        "compose: compose/oncebox.toml with compose.yaml",
    );
}

/// `promtool`, from Debian's `prometheus` package (scripts/test-tools.sh installs it).
fn promtool() -> Command {
    let found = Command::new("promtool").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "promtool is missing: install Debian's prometheus package (scripts/test-tools.sh does)"
    );
    Command::new("promtool")
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let dir = root().join("deploy/prometheus");
    let (ok, text) =
        run(promtool()
            .current_dir(&dir)
            .args(["check", "rules", "oncebox-rules.yml"]));
    assert!(ok, "promtool check rules: {text}");
    let (ok, text) =
        run(promtool()
            .current_dir(&dir)
            .args(["test", "rules", "oncebox-rules.test.yml"]));
    assert!(ok, "promtool test rules: {text}");
    assert!(text.contains("SUCCESS"), "{text}");
    // Every alert is unit-tested, and has its runbook line in the observability guide.
    let rules = std::fs::read_to_string(dir.join("oncebox-rules.yml")).expect("rules");
    let tests = std::fs::read_to_string(dir.join("oncebox-rules.test.yml")).expect("tests");
    let guide = std::fs::read_to_string(root().join("docs/observability.md")).expect("guide");
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 10, "{alerts:?}");
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no promtool unit test"
        );
        assert!(
            guide.contains(&format!("| `{alert}` |")),
            "{alert} has no runbook line in docs/observability.md's alert table"
        );
    }
}

/// The Grafana dashboard's queries, with Grafana's `$__rate_interval` as `5m`.
fn dashboard_queries() -> Vec<String> {
    let path = root().join("deploy/grafana/oncebox.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("dashboard")).expect("JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a panel target's expr");
            queries.push(expr.replace("$__rate_interval", "5m"));
        }
    }
    assert!(queries.len() >= 10, "{queries:?}");
    queries
}

#[test]
fn the_dashboards_queries_are_valid_promql() {
    // promtool parses the queries as recording rules: a typo fails here, not on a screen.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in dashboard_queries().iter().enumerate() {
        let quoted = serde_json::to_string(q).expect("json string");
        rules.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {quoted}\n"
        ));
    }
    let dir = std::env::temp_dir().join(format!("oncebox-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("dashboard-rules.yml");
    std::fs::write(&file, rules).expect("write");
    let (ok, text) = run(promtool().args(["check", "rules"]).arg(&file));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "a dashboard query does not parse: {text}");
}

/// The `oncebox_…` metric names in `text`, a histogram's `_bucket`, `_sum` and `_count` series
/// counted as the histogram.
fn metric_names(text: &str, histograms: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("oncebox_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let before = start.checked_sub(1).map(|b| bytes[b]);
        if !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
            let name = &text[start..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| histograms.contains(b)))
                .unwrap_or(name);
            names.insert(base.to_owned());
        }
        i = end;
    }
    names
}

#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_one_the_binaries_export() {
    let defs: Vec<_> = oncebox_worker::metrics::DEFINITIONS
        .iter()
        .chain(oncebox_api::metrics::DEFINITIONS)
        .collect();
    let histograms: BTreeSet<&str> = defs
        .iter()
        .filter(|d| d.kind == oncebox_serve::metric::Kind::Histogram)
        .map(|d| d.name)
        .collect();
    // What the binaries render: a worker's /metrics, and the API's definitions.
    let rendered = oncebox_worker::metrics::Metrics::default().render();
    let mut exported: BTreeSet<String> = rendered
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    exported.extend(
        oncebox_api::metrics::DEFINITIONS
            .iter()
            .map(|d| d.name.to_owned()),
    );
    let rules =
        std::fs::read_to_string(root().join("deploy/prometheus/oncebox-rules.yml")).expect("rules");
    let tests = std::fs::read_to_string(root().join("deploy/prometheus/oncebox-rules.test.yml"))
        .expect("rule tests");
    let dashboard = dashboard_queries().join("\n");
    for (what, text) in [
        ("the alert rules", rules),
        ("the rules' unit tests", tests),
        ("the dashboard", dashboard),
    ] {
        let named = metric_names(&text, &histograms);
        assert!(!named.is_empty(), "{what} name no oncebox metric");
        let unknown: Vec<_> = named.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{what} name metrics no binary exports: {unknown:?} (exported: {exported:?})"
        );
    }
}

/// Runs the Python `check` with `doc` as JSON on its standard input.
fn keda_check(check: &str, doc: &Value) -> std::process::Output {
    use std::io::Write as _;
    let mut child = Command::new(pytools().join("python"))
        .args(["-c", check])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(doc.to_string().as_bytes())
        .expect("the document");
    child.wait_with_output().expect("the check")
}

/// The KEDA overlay (`deploy/k8s-keda`): it renders everything of `deploy/k8s` but the CPU
/// HorizontalPodAutoscaler, plus a ScaledObject for the worker Deployment that validates against
/// KEDA's CRD schema (PyPI `cloudcoil-models-keda`, models generated from KEDA's CRDs: every
/// field known and of its type, the required ones present); and its trigger queries run on a
/// migrated database, answering the ready depth and the oldest ready age.
#[tokio::test]
async fn the_keda_overlay_scales_workers_on_the_ready_queue_and_validates() {
    let out = run_ok(
        Command::new(pytools().join("kubectl"))
            .arg("kustomize")
            .arg(root().join("deploy/k8s-keda")),
    );
    let rendered = std::env::temp_dir().join(format!("oncebox-keda-{}.yaml", std::process::id()));
    std::fs::write(&rendered, &out.stdout).expect("rendered");
    let docs = yaml_docs(&rendered);
    let _ = std::fs::remove_file(&rendered);
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(!kinds.contains(&"HorizontalPodAutoscaler"), "{kinds:?}");
    let scaled: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ScaledObject")
        .collect();
    assert_eq!(scaled.len(), 1, "{kinds:?}");
    let so = scaled[0];
    let worker = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "oncebox-worker")
        .expect("the worker Deployment");
    assert_eq!(
        so["spec"]["scaleTargetRef"]["name"],
        worker["metadata"]["name"]
    );
    assert_eq!(so["metadata"]["namespace"], worker["metadata"]["namespace"]);

    // Against KEDA's schema: parsed by the generated model, and nothing of it dropped as unknown.
    let check = "import sys, json\n\
        from cloudcoil.models.keda.v1alpha1 import ScaledObject\n\
        doc = json.load(sys.stdin)\n\
        parsed = ScaledObject.model_validate(doc).model_dump(by_alias=True, exclude_none=True, mode='json')\n\
        def lost(a, b, at):\n\
        \x20   if isinstance(a, dict):\n\
        \x20       return [p for k, v in a.items() for p in ([at + '/' + k] if k not in b else lost(v, b[k], at + '/' + k))]\n\
        \x20   if isinstance(a, list):\n\
        \x20       return [p for i, v in enumerate(a) for p in lost(v, b[i], at + '/' + str(i))]\n\
        \x20   return []\n\
        missing = lost(doc, parsed, '')\n\
        print('unknown fields: ' + ', '.join(missing) if missing else 'ok')\n\
        sys.exit(1 if missing else 0)\n";
    let out = keda_check(check, so);
    assert!(
        out.status.success(),
        "the ScaledObject against KEDA's schema: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A field KEDA does not know is caught (the check can fail).
    let mut bad = so.clone();
    bad["spec"]["maxReplicas"] = Value::from(8);
    let out = keda_check(check, &bad);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("/spec/maxReplicas"));

    // The triggers: KEDA's postgresql scaler, the workers' own DATABASE_URL, and queries that
    // answer one number on a migrated database — 0 when idle, the depth and age with rows ready.
    let db = support::TestDb::new("deploy", "keda", true).await;
    let pool = db.pool(1).await;
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, \
         payload) SELECT 't', 'k' || g, 'a', repeat('0', 64), '{}' FROM generate_series(1, 3) g \
         RETURNING id, tenant_id) INSERT INTO oncebox.outbox (intent_id, phase, tenant_id, \
         available_at) SELECT id, 'deliver', tenant_id, now() - interval '30 seconds' FROM i",
    )
    .execute(&pool)
    .await
    .expect("three ready rows");
    let triggers = so["spec"]["triggers"].as_array().expect("triggers");
    let names: Vec<&str> = triggers.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["ready-depth", "oldest-ready-age"]);
    for t in triggers {
        assert_eq!(t["type"], "postgresql");
        assert_eq!(t["metadata"]["connectionFromEnv"], "DATABASE_URL");
        let query = t["metadata"]["query"].as_str().expect("query").to_owned();
        let value: f64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT ({query})::float8")))
                .fetch_one(&pool)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", t["name"]));
        match t["name"].as_str() {
            Some("ready-depth") => assert_eq!(value, 3.0),
            _ => assert!((30.0..60.0).contains(&value), "age {value}"),
        }
    }
    pool.close().await;
    db.drop_db().await;
}
