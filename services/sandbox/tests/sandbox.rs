//! The sandbox with real bubblewrap (scripts/test installs it): a command's change set is
//! exactly what it did to its copy; the host's home, data, keyring, network and other
//! runs' copies stay out of reach; processes, wall time and output are capped, and a
//! killed command leaves no process behind.

use baton_events::FileChangeKind;
use baton_sandbox::{Exit, Limits, Sandbox, Spec, Workdir};
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Setup {
    sandbox: Sandbox,
    parent: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.parent);
    }
}

async fn setup() -> Setup {
    let sandbox = Sandbox::detect()
        .await
        .unwrap_or_else(|e| panic!("bubblewrap must work here (scripts/test installs it): {e}"));
    let parent = baton_sandbox::bwrap::tempdir_of(&std::env::temp_dir()).expect("parent");
    Setup { sandbox, parent }
}

impl Setup {
    fn workdir(&self, files: &[(&str, &str)]) -> Workdir {
        let files = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect();
        Workdir::materialize(&self.parent, files, self.sandbox.owner()).expect("materialize")
    }

    async fn sh(&self, dir: &Workdir, script: &str, limits: &Limits) -> baton_sandbox::Outcome {
        let spec = Spec::command(vec!["/bin/sh".into(), "-c".into(), script.into()]);
        self.sandbox.run(dir, &spec, limits).await.expect("run")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn a_command_changes_exactly_its_change_set() {
    let s = setup().await;
    let dir = s.workdir(&[
        ("keep.txt", "same"),
        ("edit.txt", "before"),
        ("gone.txt", "bye"),
        ("deep/x.txt", "x"),
    ]);
    let out = s
        .sh(
            &dir,
            "cat keep.txt; echo new > added.txt; echo after > edit.txt; rm gone.txt; \
             mkdir -p out && printf 'a,b\\n' > out/r.csv; ln -s /etc/passwd link; \
             mkfifo pipe",
            &Limits::default(),
        )
        .await;
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "same");
    let set = dir.changes(1 << 20, 100).expect("changes");
    let got: Vec<(&str, FileChangeKind, Option<&[u8]>)> = set
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind, c.content.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("added.txt", FileChangeKind::Added, Some(&b"new\n"[..])),
            ("edit.txt", FileChangeKind::Modified, Some(&b"after\n"[..])),
            ("gone.txt", FileChangeKind::Removed, None),
            ("out/r.csv", FileChangeKind::Added, Some(&b"a,b\n"[..])),
        ]
    );
    let refused: Vec<(&str, &str)> = set
        .refused
        .iter()
        .map(|r| (r.path.as_str(), r.why.as_str()))
        .collect();
    assert_eq!(
        refused,
        [("link", "a symbolic link"), ("pipe", "not a regular file")]
    );
    assert!(
        set.summary()
            .starts_with("2 added, 1 modified, 1 removed; not kept: link")
    );
}

#[tokio::test]
async fn the_host_stays_out_of_reach() {
    let s = setup().await;
    // What a sandbox must not see: Baton's data directory with its keyring, another
    // run's copy, the host's home, its databases and services.
    let data = tempfile::tempdir().expect("data dir");
    let keyring = data.path().join("keyring.toml");
    std::fs::write(&keyring, "key = \"secret\"").expect("keyring");
    let other = s.workdir(&[("secret.txt", "the other run's")]);
    let mine = s.workdir(&[]);
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let probes = [
        format!("cat {}", keyring.display()),
        format!("ls {}", data.path().display()),
        format!("cat {}/secret.txt", other.path().display()),
        format!("ls {}", s.parent.display()),
        format!("ls -d {home}/."),
        "cat /etc/shadow".to_string(),
        "cat /etc/passwd".to_string(),
        "ls /var/lib/postgresql".to_string(),
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 5432), 2)'"
            .to_string(),
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)'".to_string(),
        "echo x > /usr/bin/planted".to_string(),
    ];
    for probe in probes {
        let out = s.sh(&mine, &probe, &Limits::default()).await;
        assert_ne!(
            out.exit,
            Exit::Code(0),
            "{probe}: reached it: {}",
            text(&out.stdout)
        );
    }
    assert!(!Path::new("/usr/bin/planted").exists());
    // What it does see: its own copy, a private /tmp, the system's programs.
    let out = s
        .sh(
            &mine,
            "echo ok > /tmp/t && cat /tmp/t && python3 -c 'print(6*7)'",
            &Limits::default(),
        )
        .await;
    assert_eq!(text(&out.stdout), "ok\n42\n", "{}", text(&out.stderr));
}

#[tokio::test]
async fn a_fork_storm_is_capped() {
    let s = setup().await;
    let dir = s.workdir(&[]);
    let limits = Limits {
        processes: 16,
        wall: Duration::from_secs(20),
        ..Limits::default()
    };
    let out = s
        .sh(
            &dir,
            "i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done; echo started",
            &limits,
        )
        .await;
    assert_ne!(out.exit, Exit::TimedOut);
    assert!(
        text(&out.stderr).contains("fork"),
        "the storm was not stopped: {:?} {}",
        out.exit,
        text(&out.stderr)
    );
}

/// Host processes whose command line holds `marker`.
fn processes_with(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| {
            String::from_utf8_lossy(c)
                .replace('\0', " ")
                .contains(marker)
        })
        .count()
}

#[tokio::test]
async fn a_long_command_is_killed_with_its_children_at_the_limit() {
    let s = setup().await;
    let dir = s.workdir(&[]);
    let limits = Limits {
        wall: Duration::from_secs(3),
        ..Limits::default()
    };
    // An orphan in the background, and the command itself, both far past the limit.
    let marker = format!("6{}", rand_digits());
    let script = format!("(setsid sleep {marker} &); sleep {marker}; echo done > late.txt");
    let out = s.sh(&dir, &script, &limits).await;
    assert_eq!(out.exit, Exit::TimedOut);
    assert!(out.duration < Duration::from_secs(6), "{:?}", out.duration);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while processes_with(&format!("sleep {marker}")) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a process of the killed command is still running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!dir.path().join("late.txt").exists());
}

fn rand_digits() -> String {
    let n = uuid::Uuid::new_v4().as_u128() % 1_000_000;
    format!("{n:06}")
}

#[tokio::test]
async fn output_is_capped_and_read_to_its_end() {
    let s = setup().await;
    let dir = s.workdir(&[]);
    let limits = Limits {
        output_bytes: 1000,
        ..Limits::default()
    };
    let out = s
        .sh(
            &dir,
            "head -c 1000000 /dev/zero | tr '\\0' x; echo end >&2",
            &limits,
        )
        .await;
    assert_eq!(out.exit, Exit::Code(0));
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.truncated);
    assert_eq!(text(&out.stderr), "end\n");
}

#[tokio::test]
async fn a_dropped_copy_is_removed_even_when_locked() {
    let s = setup().await;
    let dir = s.workdir(&[("a/b.txt", "x")]);
    let out = s.sh(&dir, "chmod 000 a", &Limits::default()).await;
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    let path = dir.path().to_path_buf();
    drop(dir);
    assert!(!path.exists());
}

#[tokio::test]
async fn each_sandbox_counts_only_its_own_processes() {
    let s = setup().await;
    let limits = Limits {
        processes: 32,
        ..Limits::default()
    };
    // Eight sandboxes at once, each with 20 processes: 160 in all, under 32 each.
    let dirs: Vec<Workdir> = (0..8).map(|_| s.workdir(&[])).collect();
    let runs = dirs.iter().map(|d| {
        s.sh(
            d,
            "i=0; while [ $i -lt 20 ]; do sleep 1 & i=$((i+1)); done; wait; echo ok",
            &limits,
        )
    });
    for out in futures::future::join_all(runs).await {
        assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "ok\n");
    }
}

#[tokio::test]
async fn an_environments_layers_are_seen_read_only_with_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup().await;
    // A dependency layer: a directory the sandbox's user may read, with a program in it.
    let layer = s.parent.join("layer");
    std::fs::create_dir_all(layer.join("bin")).expect("layer");
    std::fs::write(layer.join("data.txt"), "from the layer").expect("data");
    let tool = layer.join("bin/greet");
    std::fs::write(&tool, "#!/bin/sh\necho hello from greet\n").expect("tool");
    for (path, mode) in [
        (&s.parent, 0o711),
        (&layer, 0o755),
        (&layer.join("bin"), 0o755),
    ] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("mode");
    }
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("mode");
    std::fs::set_permissions(
        layer.join("data.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("mode");
    let dir = s.workdir(&[]);
    let mut spec = Spec::command(vec![
        "/bin/sh".into(),
        "-c".into(),
        "cat /opt/env/data.txt; echo; greet; touch /opt/env/new 2>/dev/null && echo WROTE; \
         echo $PATH"
            .into(),
    ]);
    spec.layers = vec![(layer.clone(), "/opt/env".into())];
    spec.path = Some("/opt/env/bin:/usr/bin:/bin".into());
    let out = s
        .sandbox
        .run(&dir, &spec, &Limits::default())
        .await
        .expect("run");
    assert_eq!(out.exit, Exit::Code(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "from the layer\nhello from greet\n/opt/env/bin:/usr/bin:/bin\n",
        "the layer is read-only and its programs are on PATH"
    );
    assert!(!layer.join("new").exists());
}
