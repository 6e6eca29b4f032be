//! The Dockerfile, read rather than built (no Docker engine here): its instructions parsed
//! by stage, and the image they describe checked against the workspace (Rust version,
//! members), the build context, and this build's `baton config explain`. [`dockerfile`]
//! also gives the chart tests the image's uid.

use crate::config::explain;
use crate::tools::{cargo_toml, read};
use std::collections::BTreeMap;

struct Instruction {
    stage: usize,
    op: String,
    args: String,
}

pub struct Dockerfile {
    instructions: Vec<Instruction>,
    args: BTreeMap<String, String>,
    pub uid: u32,
}

/// Instructions with continuation lines joined and comments dropped, tagged by stage.
pub fn dockerfile() -> Dockerfile {
    let source = read("Dockerfile");
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in source.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    let mut instructions = Vec::new();
    let mut args = BTreeMap::new();
    let mut stage = 0;
    for line in logical {
        let (op, rest) = line.split_once(' ').expect("instruction with arguments");
        let op = op.to_ascii_uppercase();
        if op == "FROM" {
            stage += 1;
        }
        if op == "ARG" && stage == 0 {
            let (k, v) = rest.trim().split_once('=').expect("ARG NAME=default");
            args.insert(k.to_owned(), v.to_owned());
        }
        instructions.push(Instruction {
            stage,
            op,
            args: rest.trim().to_owned(),
        });
    }
    let user = instructions
        .iter()
        .rev()
        .find(|i| i.op == "USER")
        .expect("a USER instruction")
        .args
        .clone();
    let (uid, gid) = user.split_once(':').unwrap_or((&user, "0"));
    let uid: u32 = uid.parse().expect("USER is a numeric uid");
    let _: u32 = gid.parse().expect("USER's group is numeric");
    Dockerfile {
        instructions,
        args,
        uid,
    }
}

impl Dockerfile {
    fn expand(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (k, v) in &self.args {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }

    fn stage_ops(&self, stage: usize, op: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|i| i.stage == stage && i.op == op)
            .map(|i| i.args.as_str())
            .collect()
    }

    fn last_stage(&self) -> usize {
        self.instructions.last().expect("instructions").stage
    }

    /// The JSON (exec) form of `op` in the final stage.
    fn exec_form(&self, op: &str) -> Vec<String> {
        let args = self.stage_ops(self.last_stage(), op);
        let args = args.last().unwrap_or_else(|| panic!("no {op}"));
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{op} is not exec form: {e}"))
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.stage_ops(self.last_stage(), "ENV")
            .iter()
            .flat_map(|args| args.split_whitespace())
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }
}

#[test]
fn dockerfile_runs_the_binary_it_builds_as_a_non_root_user() {
    let d = dockerfile();
    let froms: Vec<String> = d
        .instructions
        .iter()
        .filter(|i| i.op == "FROM")
        .map(|i| d.expand(&i.args))
        .collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");

    // Builder: a Rust at least as new as the workspace's rust-version, then the same Debian
    // release as the runtime (glibc).
    let (builder_image, builder) = froms[0].split_once(" AS ").expect("FROM image AS name");
    let manifest = cargo_toml();
    let msrv = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .expect("rust-version");
    let rust_tag = builder_image
        .strip_prefix("rust:")
        .expect("a rust: builder");
    let (rust, release) = rust_tag.split_once('-').expect("rust:VERSION-RELEASE");
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().expect("num")).collect() };
    assert!(version(rust) >= version(msrv), "rust {rust} < {msrv}");
    let runtime_image = froms[1].split_whitespace().next().expect("runtime image");
    assert_eq!(runtime_image, format!("debian:{release}-slim"));
    // Both bases can be pinned by digest; by default the tags alone are used.
    for (from, digest) in [(0, "BUILDER_DIGEST"), (1, "RUNTIME_DIGEST")] {
        let raw = d.instructions.iter().filter(|i| i.op == "FROM").nth(from);
        let raw = raw
            .expect("FROM")
            .args
            .split_whitespace()
            .next()
            .expect("image");
        assert!(raw.ends_with(&format!("${{{digest}}}")), "{raw}");
        assert_eq!(d.args.get(digest).map(String::as_str), Some(""));
    }
    // OCI labels on the image, its version the workspace's by default.
    let labels = d.stage_ops(d.last_stage(), "LABEL").join(" ");
    let version = manifest["workspace"]["package"]["version"]
        .as_str()
        .expect("version");
    assert_eq!(
        d.args.get("BATON_VERSION").map(String::as_str),
        Some(version)
    );
    for label in [
        "org.opencontainers.image.title=\"baton\"",
        "org.opencontainers.image.version=\"${BATON_VERSION}\"",
        "org.opencontainers.image.revision=\"${BATON_REVISION}\"",
    ] {
        assert!(labels.contains(label), "{label} in {labels}");
    }
    for arg in ["BATON_VERSION", "BATON_REVISION"] {
        assert!(
            d.stage_ops(d.last_stage(), "ARG").contains(&arg),
            "the runtime stage declares {arg}"
        );
    }

    // The release build, its output copied out of the cache mount, into the runtime, run.
    let workdir = d.stage_ops(1, "WORKDIR");
    let workdir = workdir.last().expect("builder WORKDIR");
    let build = d
        .stage_ops(1, "RUN")
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .expect("a cargo build step");
    let tokens: Vec<&str> = build.split_whitespace().collect();
    for flag in ["--release", "--locked"] {
        assert!(tokens.contains(&flag), "cargo build {flag}: {build}");
    }
    assert!(
        tokens.windows(2).any(|w| w == ["--bin", "baton"]),
        "{build}"
    );
    assert!(!build.contains("--target ") && !build.contains("CARGO_TARGET_DIR"));
    let output = "target/release/baton";
    let copied_to = tokens
        .iter()
        .position(|t| *t == output)
        .map(|i| tokens[i + 1].to_owned());
    if build.contains(&format!("target={workdir}/target")) {
        assert!(
            copied_to.is_some(),
            "target/ is a cache mount: the binary must be copied out in the same step"
        );
    }
    let built = copied_to.unwrap_or_else(|| format!("{workdir}/{output}"));
    let runtime = d.last_stage();
    let copy = d
        .stage_ops(runtime, "COPY")
        .into_iter()
        .find(|c| c.starts_with(&format!("--from={builder} ")))
        .expect("COPY --from the builder");
    let copy: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(
        copy[1], built,
        "the runtime copies what the builder produced"
    );
    let entrypoint = d.exec_form("ENTRYPOINT");
    assert_eq!(entrypoint, [copy[2]], "ENTRYPOINT is the copied binary");
    assert_eq!(d.exec_form("CMD"), ["serve"]);

    // Non-root, numeric, and created in the image; its data directory is the WORKDIR.
    assert!(d.uid > 0, "USER must not be root");
    let setup = d.stage_ops(runtime, "RUN").join(" ");
    assert!(setup.contains(&format!("--uid {}", d.uid)), "{setup}");
    let env = d.env();
    let data_dir = &env["BATON_DATA_DIR"];
    assert_eq!(d.stage_ops(runtime, "WORKDIR"), [data_dir.as_str()]);
    assert!(
        setup.contains(&format!("-o {} ", d.uid)) && setup.contains(data_dir.as_str()),
        "the data directory belongs to the user: {setup}"
    );

    // Listens outside loopback only with auth required; this build accepts the settings.
    let listen: std::net::SocketAddr = env["BATON_HTTP__LISTEN"].parse().expect("listen");
    assert_eq!(
        d.stage_ops(runtime, "EXPOSE"),
        [listen.port().to_string().as_str()]
    );
    if !listen.ip().is_loopback() {
        assert_eq!(env["BATON_AUTH__REQUIRED"], "true");
    }
    let explained = explain(&env);
    assert_eq!(explained["http.listen"].0, listen.to_string());
    assert_eq!(explained["auth.required"].0, "true");
    assert_eq!(explained["tier"].0, "embedded", "docs/deploy.md says so");
    let health = d.stage_ops(runtime, "HEALTHCHECK").join(" ");
    let (_, probe) = health
        .split_once(" CMD ")
        .expect("HEALTHCHECK ... CMD [...]");
    let probe: Vec<String> = serde_json::from_str(probe).expect("HEALTHCHECK CMD in exec form");
    assert!(
        probe[0] == "/bin/bash"
            && probe[2].contains(&format!("/dev/tcp/127.0.0.1/{} ", listen.port()))
            && probe[2].contains("GET /livez HTTP/1.0\\r\\n"),
        "{probe:?}"
    );

    // The build context holds every workspace member and the migrations.
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_matches('/').to_owned())
        .collect();
    for excluded in ["target", ".git"] {
        assert!(
            ignored.iter().any(|i| i == excluded),
            "{excluded} not ignored"
        );
    }
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("members");
    let needed = members
        .iter()
        .map(|m| m.as_str().expect("member").to_owned())
        .chain(["Cargo.toml", "Cargo.lock", "migrations"].map(String::from));
    for path in needed {
        let top = path.split('/').next().expect("path");
        assert!(
            !ignored.iter().any(|i| i == &path || i == top),
            ".dockerignore drops {path}, which the build needs"
        );
    }
}
