//! What a command costs before and after it runs: materializing a workspace of 1,000
//! files / 50 MB into a fresh copy (and removing it), comparing such a copy into its
//! change set, and one command (`true`) in a bubblewrap sandbox over an empty copy, from
//! set-up to exit.
//!
//! `cargo bench -p baton-sandbox --bench sandbox`.

use baton_sandbox::{Limits, Sandbox, Spec, Workdir};
use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

const FILES: usize = 1_000;
const BYTES: usize = 50 << 20;

fn workspace() -> Vec<(String, Vec<u8>)> {
    let each = BYTES / FILES;
    (0..FILES)
        .map(|i| {
            let content = (0..each).map(|j| (i * 31 + j) as u8).collect();
            (format!("data/{:02}/file-{i:04}.bin", i % 50), content)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sandbox = rt.block_on(Sandbox::detect()).expect("bubblewrap");
    let parent = baton_sandbox::bwrap::tempdir_of(&std::env::temp_dir()).expect("parent");
    let files = workspace();

    let mut g = c.benchmark_group("workspace");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.bench_function("materialize 1000 files / 50 MB, then remove", |b| {
        b.iter(|| {
            let dir =
                Workdir::materialize(&parent, files.clone(), sandbox.owner()).expect("materialize");
            drop(dir);
        })
    });
    let dir = Workdir::materialize(&parent, files.clone(), sandbox.owner()).expect("materialize");
    g.bench_function("compare 1000 files / 50 MB into a change set", |b| {
        b.iter(|| dir.changes(1 << 20, 10_000).expect("changes"))
    });
    drop(dir);
    g.finish();

    let mut g = c.benchmark_group("sandbox");
    g.sample_size(30);
    let empty = Workdir::materialize(&parent, Vec::new(), sandbox.owner()).expect("materialize");
    let spec = Spec::command(vec!["true".into()]);
    g.bench_function("one command (true), set-up to exit", |b| {
        b.to_async(&rt).iter(|| async {
            let out = sandbox
                .run(&empty, &spec, &Limits::default())
                .await
                .expect("run");
            assert!(
                out.succeeded(),
                "{:?}: {}",
                out.exit,
                String::from_utf8_lossy(&out.stderr)
            );
        })
    });
    g.finish();
    drop(empty);
    let _ = std::fs::remove_dir_all(&parent);
}

criterion_group!(benches, bench);
criterion_main!(benches);
