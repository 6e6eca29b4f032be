//! Schedules across replicas (issue 18): three real `baton` processes on one Postgres
//! fire a schedule every two seconds while replicas are SIGKILLed and restarted in turn.
//! Every fire time from the first to the last creates exactly one run (none skipped,
//! none doubled, whichever replica claimed it and whichever recorded it), and the
//! lateness of the fires (the run's creation after its fire time) is reported.

use crate::support::{DEADLINE, client, start_cluster, until};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Looks every 200 ms at the latest (sooner for the next fire time each replica knows),
/// and lets a schedule fire every two seconds.
const FAST_LOOKS: [(&str, &str); 2] = [
    ("BATON_SCHEDULES__POLL_INTERVAL_MS", "200"),
    ("BATON_SCHEDULES__MIN_INTERVAL_MS", "1000"),
];
/// How long the schedule fires with replicas dying under it.
const FIRING: Duration = Duration::from_secs(24);

fn instant(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("an RFC 3339 instant, not {v}"))
}

#[tokio::test]
async fn sigkills_of_replicas_never_skip_or_double_a_fire() {
    let (mut cluster, apis) = start_cluster(3, &FAST_LOOKS, None).await;
    let agent = apis[0].agent(&[("ok", 0, false)]).await;
    let made = apis[0]
        .post(
            "/v1/schedules",
            json!({"name": "every two seconds", "agent_id": agent,
                   "message": "tick {{fire_time}}", "cron": "*/2 * * * * *"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["id"].as_str().expect("id").to_string();
    let first = instant(&made.body["next_fire_at"]);

    // Kill one replica at a time, at an offset that moves through the two-second cycle,
    // and bring it back: at every moment at least two replicas run.
    let started = tokio::time::Instant::now();
    let mut kills = 0;
    let mut victim = 0;
    while started.elapsed() < FIRING {
        tokio::time::sleep(Duration::from_millis(1_300 + 170 * (kills % 7))).await;
        cluster.sigkill(victim).expect("sigkill");
        kills += 1;
        tokio::time::sleep(Duration::from_millis(600)).await;
        cluster.restart(victim).await.expect("restart");
        victim = (victim + 1) % 3;
    }
    // A restarted replica listens on a new port: a client of its own.
    let key = apis[0].token.clone().expect("the owner's key");
    let api = &client(&cluster, (victim + 1) % 3, &key);
    let paused = api
        .post(&format!("/v1/schedules/{id}/pause"), json!({}))
        .await;
    assert_eq!(paused.status, 200, "{}", paused.body);

    // Once paused, the schedule's count and its runs settle (a fire claimed before the
    // pause is still recorded).
    let path = format!("/v1/runs?metadata=schedule_id:{id}&limit=500");
    let (schedule, runs) = until("the fires to settle", DEADLINE, || async {
        let s = api.get(&format!("/v1/schedules/{id}")).await.body;
        let runs = api.get(&path).await.body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (s["fires"].as_u64() == Some(runs.len() as u64)).then_some((s, runs))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = api.get(&path).await.body["items"]
        .as_array()
        .map(Vec::len)
        .unwrap_or_default();
    assert_eq!(again, runs.len(), "nothing fires after the pause settled");

    let mut by_time: BTreeMap<DateTime<Utc>, Vec<DateTime<Utc>>> = BTreeMap::new();
    for r in &runs {
        by_time
            .entry(instant(&r["metadata"]["fire_time"]))
            .or_default()
            .push(instant(&r["created_at"]));
        assert_eq!(r["metadata"]["trigger"], "timetable", "{r}");
    }
    let doubled: Vec<_> = by_time.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(
        doubled.is_empty(),
        "fire times with more than one run: {doubled:?}"
    );
    let times: Vec<DateTime<Utc>> = by_time.keys().copied().collect();
    let last = *times.last().expect("some fires");
    let expected: Vec<DateTime<Utc>> = (0..)
        .map(|i| first + TimeDelta::seconds(2 * i))
        .take_while(|t| *t <= last)
        .collect();
    assert_eq!(
        times, expected,
        "every fire time from the first to the last, once"
    );
    assert!(
        times.len() >= 10,
        "{} fires in {FIRING:?} ({kills} kills)",
        times.len()
    );
    assert_eq!(schedule["skipped"], 0, "{schedule}");
    assert_eq!(instant(&schedule["last_fire_at"]), last);

    let mut lateness: Vec<i64> = by_time
        .iter()
        .map(|(fire, created)| (created[0] - *fire).num_milliseconds())
        .collect();
    lateness.sort_unstable();
    let pct = |p: usize| lateness[(lateness.len() * p / 100).min(lateness.len() - 1)];
    println!(
        "schedules: {} fires, {kills} SIGKILLs, none skipped or doubled; lateness p50 {} ms, \
         p99 {} ms, max {} ms",
        lateness.len(),
        pct(50),
        pct(99),
        lateness[lateness.len() - 1]
    );
    assert!(
        lateness[lateness.len() - 1] < 60_000,
        "every fire within the grace: {lateness:?}"
    );
}
