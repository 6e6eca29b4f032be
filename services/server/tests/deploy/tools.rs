//! The chart tools and the workspace files: where `helm`, `kubernetes-validate`, `promtool`
//! and the tools' `python` are, and how each runs (helm's state kept in a temp dir, values
//! written to files, YAML parsed to JSON). Runs and reads only; what the output must say is
//! the tests'.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The oldest version the chart supports (Chart.yaml `kubeVersion`) up to a current one.
pub const K8S_VERSIONS: [&str; 3] = ["1.27.0", "1.30.0", "1.35.0"];
pub const RELEASE: &str = "baton";
pub const NAMESPACE: &str = "agents";
/// The chart's directory in the workspace.
pub const CHART: &str = "helm/baton";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A workspace file, by its path from the root.
pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The workspace's `Cargo.toml`.
pub fn cargo_toml() -> toml::Table {
    read("Cargo.toml").parse().expect("Cargo.toml")
}

/// A process's stdout then stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub struct Tools {
    helm: PathBuf,
    kubernetes_validate: PathBuf,
    python: PathBuf,
    promtool: PathBuf,
    home: tempfile::TempDir,
}

pub fn tools() -> Tools {
    Tools {
        helm: baton_testkit::chart_tool("helm"),
        kubernetes_validate: baton_testkit::chart_tool("kubernetes-validate"),
        python: baton_testkit::chart_tool("python"),
        promtool: baton_testkit::chart_tool("promtool"),
        home: tempfile::tempdir().expect("tempdir"),
    }
}

impl Tools {
    /// `helm ARGS -f FILE`, with `values` (JSON is YAML) written to FILE and helm's cache and
    /// config kept out of the user's home.
    pub fn helm(&self, args: &[&str], name: &str, values: &Value) -> Output {
        let file = self.home.path().join(format!("{name}.values.yaml"));
        std::fs::write(&file, values.to_string()).expect("write values");
        let home = self.home.path();
        Command::new(&self.helm)
            .args(args)
            .arg("-f")
            .arg(&file)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("helm runs")
    }

    /// `helm template` of the chart with `values`; the output, or the failure.
    pub fn template(&self, name: &str, values: &Value) -> Result<String, String> {
        let chart = chart_dir();
        let args = ["template", RELEASE, &chart, "--namespace", NAMESPACE];
        let out = self.helm(&args, name, values);
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).expect("utf-8"))
        } else {
            Err(text(&out))
        }
    }

    /// `kubernetes-validate --strict -k VERSION FILES`.
    pub fn validate(&self, version: &str, files: &[PathBuf]) -> Output {
        Command::new(&self.kubernetes_validate)
            .args(["--strict", "-k", version])
            .args(files)
            .output()
            .expect("kubernetes-validate runs")
    }

    /// `promtool ARGS`, run in `dir`.
    pub fn promtool(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new(&self.promtool)
            .args(args)
            .current_dir(dir)
            .output()
            .expect("promtool runs")
    }

    /// `python SCRIPT ARGS` with the tools' Python (which has PyYAML), run at the root.
    pub fn python(&self, script: &str, args: &[&str]) -> Output {
        Command::new(&self.python)
            .arg(script)
            .args(args)
            .current_dir(root())
            .output()
            .expect("python runs")
    }

    /// A scratch directory that lives as long as these tools.
    pub fn scratch(&self) -> &Path {
        self.home.path()
    }

    /// Every YAML document of `yaml` as JSON (PyYAML, from the tools' venv).
    pub fn parse_yaml(&self, yaml: &str) -> Vec<Value> {
        let path = self.home.path().join("parse.yaml");
        std::fs::write(&path, yaml).expect("write yaml");
        let out = Command::new(&self.python)
            .args([
                "-c",
                "import json, sys, yaml\n\
                 docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
                 json.dump(docs, sys.stdout)",
            ])
            .arg(&path)
            .output()
            .expect("python runs");
        assert!(out.status.success(), "parsing YAML: {}", text(&out));
        serde_json::from_slice(&out.stdout).expect("JSON from python")
    }
}

/// The chart's directory, as an argument for helm.
pub fn chart_dir() -> String {
    root().join(CHART).to_string_lossy().into_owned()
}
