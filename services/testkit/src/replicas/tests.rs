//! The harness against a fake `baton` (a shell script speaking the same stdout protocol),
//! so it is tested without building Baton; the invariant checks against hand-made rows.

use super::Cluster;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

/// `serve` logs its environment to stderr, prints the listening line (its pid as the
/// "port", so each process differs) and loops until SIGTERM, which it answers with exit 0;
/// with `FAKE_FAIL` set it refuses to start. `admin create-tenant NAME` prints what the
/// real one prints.
const FAKE_BATON: &str = r#"#!/bin/sh
case "$1" in
serve)
  if [ -n "$FAKE_FAIL" ]; then echo "fake: refusing to start" >&2; exit 3; fi
  echo "env name=$BATON_REPLICA_NAME db=$BATON_DATABASE__URL nats=$BATON_BUS__NATS_URL format=$BATON_LOG__FORMAT home=${HOME:-unset} extra=${FAKE_EXTRA:-unset}" >&2
  echo "args $*" >&2
  trap 'echo "fake: terminated" >&2; exit 0' TERM
  echo "baton listening on http://127.0.0.1:$$"
  while :; do sleep 0.02; done ;;
admin)
  echo "tenant_id: 0190a000-0000-7000-8000-000000000001"
  echo "api_key:   bk_fake_$3"
  echo "The API key is shown once: store it now." >&2 ;;
esac
"#;

/// Writes the fake binary into a fresh directory (kept alive by the returned guard).
fn fake_baton() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("baton");
    std::fs::write(&bin, FAKE_BATON).expect("write the fake");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, bin)
}

/// The one-letter state of a process from `/proc/<pid>/stat` (`T` when stopped).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Polls until the state of process `pid` satisfies `want` (`None`: no such process).
async fn wait_state(pid: u32, want: impl Fn(Option<char>) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !want(state(pid)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pid {pid} is still {:?}",
            state(pid)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn replicas_get_a_cleared_environment_their_names_and_their_addresses() {
    let (_guard, bin) = fake_baton();
    let cluster = Cluster::builder(&bin)
        .replicas(2)
        .nats_url("nats://127.0.0.1:1")
        .env("FAKE_EXTRA", "knob")
        .start()
        .await
        .expect("start");
    assert_eq!(cluster.len(), 2);
    for i in 0..2 {
        let pid = cluster.pid(i);
        assert_eq!(cluster.base_url(i), format!("http://127.0.0.1:{pid}"));
        let log = cluster.replica(i).log_tail(100);
        let want = format!(
            "env name=replica-{i} db={} nats=nats://127.0.0.1:1 format=json home=unset extra=knob",
            cluster.database_url()
        );
        assert!(log.contains(&want), "{log}");
        assert!(
            log.contains("args serve --tier team --auth-required --listen 127.0.0.1:0"),
            "{log}"
        );
        assert!(
            log.contains("baton listening on"),
            "stdout is logged: {log}"
        );
    }
    let (tenant, key) = cluster.create_tenant("acme").await.expect("tenant");
    assert_eq!(tenant.to_string(), "0190a000-0000-7000-8000-000000000001");
    assert_eq!(key, "bk_fake_acme");
    assert!(cluster.dump_logs(5).contains("===== replica-1"));
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn signals_reach_the_process_and_wait_exit_reports_how_it_ended() {
    let (_guard, bin) = fake_baton();
    let mut cluster = Cluster::start(&bin, 2).await.expect("start");
    let pid = cluster.pid(0);

    cluster.sigstop(0).expect("stop");
    wait_state(pid, |s| s == Some('T')).await;
    assert!(cluster.is_running(0).expect("state"), "stopped is alive");
    cluster.sigcont(0).expect("cont");
    wait_state(pid, |s| s.is_some_and(|s| s != 'T')).await;
    assert!(
        cluster
            .wait_exit(0, Duration::from_millis(50))
            .await
            .is_err(),
        "a running replica times out"
    );

    cluster.sigterm(0).expect("term");
    let status = cluster
        .wait_exit(0, Duration::from_secs(5))
        .await
        .expect("exit");
    assert!(status.success(), "{status}");
    assert!(
        cluster.sigkill(0).is_err(),
        "an exited replica is not signalled"
    );

    cluster.sigkill(1).expect("kill");
    let status = cluster
        .wait_exit(1, Duration::from_secs(5))
        .await
        .expect("exit");
    assert_eq!(status.signal(), Some(9));
    assert!(cluster.sigterm(7).is_err(), "no such replica");
}

#[tokio::test]
async fn restart_replaces_the_process_under_the_same_name_and_drop_kills_everything() {
    let (_guard, bin) = fake_baton();
    let mut cluster = Cluster::start(&bin, 1).await.expect("start");
    let first = cluster.pid(0);
    cluster.sigstop(0).expect("stop");
    cluster.restart(0).await.expect("restart");
    let second = cluster.pid(0);
    assert_ne!(first, second);
    assert_eq!(state(first), None, "the old process is killed and reaped");
    assert_eq!(cluster.base_url(0), format!("http://127.0.0.1:{second}"));
    assert_eq!(cluster.replica(0).name(), "replica-0");
    assert_eq!(cluster.add_replica().await.expect("add"), 1);
    let pids = [cluster.pid(0), cluster.pid(1)];
    cluster.sigstop(1).expect("stop");
    drop(cluster);
    for pid in pids {
        assert_eq!(state(pid), None, "pid {pid} outlived the cluster");
    }
}

#[tokio::test]
async fn a_replica_that_exits_before_listening_is_reported_with_its_log() {
    let (_guard, bin) = fake_baton();
    let err = Cluster::builder(&bin)
        .env("FAKE_FAIL", "1")
        .start()
        .await
        .expect_err("refuses");
    let says = format!("{err:#}");
    assert!(says.contains("replica-0 exited before listening"), "{says}");
    assert!(says.contains("fake: refusing to start"), "{says}");
}

#[tokio::test]
async fn the_invariant_check_finds_gaps_duplicates_and_a_stale_projection() {
    let (_guard, bin) = fake_baton();
    let cluster = Cluster::start(&bin, 0).await.expect("database only");
    let pool = cluster.pool().await.expect("pool");
    // Just the columns the checks read (the real schema has a unique (stream, version)).
    for ddl in [
        "CREATE TABLE events (stream_id UUID, version BIGINT, type TEXT, meta JSONB)",
        "CREATE TABLE runs (id UUID, version BIGINT)",
    ] {
        sqlx::query(ddl).execute(pool).await.expect("ddl");
    }
    let run = uuid::Uuid::new_v4();
    let set = |versions: &'static [i64], projected: i64| async move {
        sqlx::query("DELETE FROM events")
            .execute(pool)
            .await
            .expect("clear");
        sqlx::query("DELETE FROM runs")
            .execute(pool)
            .await
            .expect("clear");
        for v in versions {
            sqlx::query(
                "INSERT INTO events VALUES ($1, $2, 'turn.started', \
                 jsonb_build_object('replica', 'replica-1/abcd'))",
            )
            .bind(run)
            .bind(v)
            .execute(pool)
            .await
            .expect("insert");
        }
        sqlx::query("INSERT INTO runs VALUES ($1, $2)")
            .bind(run)
            .bind(projected)
            .execute(pool)
            .await
            .expect("insert");
    };
    set(&[1, 2, 3], 3).await;
    assert_eq!(cluster.check_run_invariants(run).await.expect("intact"), 3);
    let rows = cluster.event_rows(run).await.expect("rows");
    assert_eq!(rows[2].replica_name(), Some("replica-1"));
    assert_eq!(rows[2].event_type, "turn.started");
    for (versions, projected, says) in [
        (&[1, 3][..], 2, "expected version 2, found 3"),
        (&[1, 2, 2][..], 3, "expected version 3, found 2"),
        (&[2][..], 2, "expected version 1, found 2"),
        (&[][..], 0, "has no events"),
        (&[1, 2][..], 1, "runs row is at version 1"),
    ] {
        set(versions, projected).await;
        let err = cluster.check_run_invariants(run).await.expect_err(says);
        assert!(format!("{err:#}").contains(says), "{err:#}");
    }
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn leases_reads_the_owner_and_epoch_of_the_runs_asked_for() {
    let (_guard, bin) = fake_baton();
    let cluster = Cluster::start(&bin, 0).await.expect("database only");
    let pool = cluster.pool().await.expect("pool");
    sqlx::query(
        "CREATE TABLE runs (id UUID, lease_owner TEXT, lease_epoch BIGINT, lease_expires_ms BIGINT)",
    )
        .execute(pool)
        .await
        .expect("ddl");
    let [held, free, other] = [0; 3].map(|_| uuid::Uuid::new_v4());
    for (run, owner, epoch, expires) in [
        (
            held,
            Some("replica-2/abcd"),
            3_i64,
            Some(1_700_000_000_000_i64),
        ),
        (free, None, 1, None),
        (other, Some("replica-0/ef01"), 7, Some(1)),
    ] {
        sqlx::query("INSERT INTO runs VALUES ($1, $2, $3, $4)")
            .bind(run)
            .bind(owner)
            .bind(epoch)
            .bind(expires)
            .execute(pool)
            .await
            .expect("insert");
    }
    let mut got = cluster.leases(&[held, free]).await.expect("leases");
    got.sort_by_key(|l| l.epoch);
    let want = vec![
        super::LeaseRow {
            run: free,
            owner: None,
            epoch: 1,
            expires_ms: None,
        },
        super::LeaseRow {
            run: held,
            owner: Some("replica-2/abcd".into()),
            epoch: 3,
            expires_ms: Some(1_700_000_000_000),
        },
    ];
    assert_eq!(got, want);
    cluster.stop().await.expect("stop");
}
