//! Queued input across replicas (issue 17): messages queued on replicas other than the
//! owner survive a SIGKILL of the owner mid-turn and are taken once each, in order, by
//! the adopter; and a `wait` answered by a replica that does not drive the run.

use crate::support::{FAST_LEASES, event_type, index_of, start_cluster, turn_owner, uuid, writer};
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// Posts `content` to `run` through `api` to wait in line.
async fn enqueue(
    api: &baton_testkit::Api,
    run: &str,
    content: &str,
    request_id: &str,
) -> baton_testkit::api::Reply {
    api.post(
        &format!("/v1/runs/{run}/messages"),
        json!({"content": content, "strategy": "enqueue", "request_id": request_id}),
    )
    .await
}

#[tokio::test]
async fn queued_messages_survive_a_sigkill_of_the_owner_and_are_taken_once_in_order() {
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let agent = apis[0]
        .agent(&[
            ("one", 3_000, false),
            ("two", 0, false),
            ("three", 0, false),
        ])
        .await;
    let run = apis[0].run(&agent, Some("go")).await;
    let run_id = uuid(&run);
    let owner = turn_owner(&cluster, run_id).await;
    let victim = index_of(&owner);
    let others: Vec<usize> = (0..3).filter(|&i| i != victim).collect();

    // Queued on the two other replicas; the second retried on the owner, queued once.
    let first = enqueue(&apis[others[0]], &run, "first", "q-first").await;
    assert_eq!(first.status, 202, "{}", first.body);
    let second = enqueue(&apis[others[1]], &run, "second", "q-second").await;
    assert_eq!(second.status, 202, "{}", second.body);
    assert_eq!(second.body["position"], 2, "{}", second.body);
    let again = enqueue(&apis[victim], &run, "second", "q-second").await;
    assert_eq!(again.body, second.body, "the retry answers the original");

    cluster.sigkill(victim).expect("sigkill");
    let status = cluster
        .wait_exit(victim, Duration::from_secs(5))
        .await
        .expect("killed replica exits");
    assert_eq!(status.signal(), Some(9), "{status}");

    let survivor = &apis[others[0]];
    let done = survivor
        .wait_run(&run, "through the queue", |r| {
            r["turn_count"] == 3 && r["status"] == "waiting"
        })
        .await;
    assert_eq!(done["queued_messages"], 0, "{done}");
    let said: Vec<(String, String)> = survivor
        .messages(&run)
        .await
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (s("role"), s("content"))
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("user", "go"),
        ("assistant", "one"),
        ("user", "first"),
        ("assistant", "two"),
        ("user", "second"),
        ("assistant", "three"),
    ]
    .iter()
    .map(|(r, c)| (r.to_string(), c.to_string()))
    .collect();
    assert_eq!(said, expected);

    let events = survivor.events(&run).await;
    cluster
        .check_run_invariants(run_id)
        .await
        .expect("invariants");
    let of = |t: &str| -> Vec<&Value> { events.iter().filter(|e| event_type(e) == t).collect() };
    let queued: Vec<&Value> = of("message.queued");
    assert_eq!(queued.len(), 2, "each queued once: {events:#?}");
    let taken: Vec<&Value> = of("message.appended")
        .into_iter()
        .filter(|e| e["data"]["queued"] == true)
        .collect();
    let ids = |es: &[&Value]| -> Vec<Value> {
        es.iter().map(|e| e["data"]["message_id"].clone()).collect()
    };
    assert_eq!(
        ids(&taken),
        ids(&queued),
        "each taken once, in the order queued"
    );
    let turns: Vec<&Value> = of("turn.requested")
        .iter()
        .map(|e| &e["data"]["turn"])
        .collect();
    assert_eq!(turns, [&json!(1), &json!(2), &json!(3)]);
    // The adopter took the queue: nothing of the killed owner after its turn.started.
    for e in &taken {
        assert_ne!(writer(e), Some(owner.as_str()), "{e}");
    }
}

#[tokio::test]
async fn a_wait_is_answered_by_a_replica_that_does_not_drive_the_run() {
    let (cluster, apis) = start_cluster(2, &[], None).await;
    let agent = apis[0]
        .agent(&[("one", 800, false), ("two", 0, false)])
        .await;
    let run = apis[0].run(&agent, Some("go")).await;
    let owner = index_of(&turn_owner(&cluster, uuid(&run)).await);
    let other = &apis[1 - owner];
    let r = other
        .post(
            &format!("/v1/runs/{run}/messages"),
            json!({"content": "and then?", "strategy": "enqueue", "wait": 20}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["state"], "started");
    assert_eq!(r.body["result"]["turn"], 2, "{}", r.body);
    assert_eq!(r.body["result"]["outcome"], "completed");
    assert_eq!(r.body["result"]["reply"]["content"], "two");
}
