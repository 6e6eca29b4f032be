//! Webhooks across replicas (issue 18): three real `baton` processes deliver to a
//! receiver that verifies with the Standard Webhooks library from PyPI. While the
//! receiver is down and replicas are SIGKILLed and restarted in turn, runs complete (a
//! subscribed type) and are cancelled (not subscribed). Every completed run is delivered
//! at least once, verified; the attempts of one event all carry its one `webhook-id`;
//! nothing of the unsubscribed type ever arrives.

use crate::support::{DEADLINE, client, start_cluster, until};
use baton_testkit::WebhookReceiver;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const FAST_DELIVERIES: [(&str, &str); 4] = [
    ("BATON_WEBHOOKS__POLL_INTERVAL_MS", "100"),
    ("BATON_WEBHOOKS__RETRY_BASE_MS", "200"),
    ("BATON_WEBHOOKS__RETRY_MAX_MS", "500"),
    ("BATON_WEBHOOKS__TIMEOUT_MS", "1000"),
];
const RUNS: usize = 12;

#[tokio::test]
async fn every_subscribed_event_arrives_through_a_receiver_outage_and_sigkills() {
    let Some(rx) = WebhookReceiver::start(Path::new(ROOT)).await else {
        return;
    };
    let (mut cluster, apis) = start_cluster(3, &FAST_DELIVERIES, None).await;
    let key = apis[0].token.clone().expect("the owner's key");
    let made = apis[0]
        .post(
            "/v1/webhooks",
            json!({"url": rx.url("in"), "events": ["run.completed"]}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    rx.set_secrets(&[made.body["secret"].as_str().expect("secret")]);
    let agent = apis[0].agent(&[("done", 0, true)]).await;

    rx.set_down(true);
    let mut completed = BTreeSet::new();
    for i in 0..RUNS {
        // Each round on a replica that runs; one replica killed and back every few.
        let live = (i / 4) % 3;
        let api = client(&cluster, (live + 1) % 3, &key);
        let run = api.run(&agent, Some("go")).await;
        completed.insert(run);
        let idle = api.run(&agent, None).await;
        let cancelled = api
            .post(&format!("/v1/runs/{idle}/cancel"), json!({}))
            .await;
        assert_eq!(cancelled.status, 200, "{}", cancelled.body);
        if i % 4 == 3 {
            cluster.sigkill(live).expect("sigkill");
            tokio::time::sleep(Duration::from_millis(300)).await;
            cluster.restart(live).await.expect("restart");
        }
    }
    let api = client(&cluster, 0, &key);
    for run in &completed {
        api.wait_status(run, "completed").await;
    }
    // Down long enough for attempts on several replicas to fail.
    until("attempts while down", DEADLINE, || async {
        (rx.received().iter().filter(|r| r.status == 503).count() >= RUNS).then_some(())
    })
    .await;
    rx.set_down(false);

    let got = until("every completed run delivered", DEADLINE * 3, || async {
        let got = rx.received();
        let delivered: BTreeSet<String> = got
            .iter()
            .filter(|r| r.status == 204 && r.verified_by == [0])
            .filter_map(|r| r.run.clone())
            .collect();
        (delivered == completed).then_some(got)
    })
    .await;
    let mut ids_of_run: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &got {
        assert_eq!(r.body_type.as_deref(), Some("run.completed"), "{r:?}");
        if let (Some(run), Some(id)) = (&r.run, &r.id) {
            ids_of_run
                .entry(run.clone())
                .or_default()
                .insert(id.clone());
        }
    }
    for (run, ids) in &ids_of_run {
        assert_eq!(
            ids.len(),
            1,
            "run {run}'s attempts carry one webhook-id: {ids:?}"
        );
    }
    let attempts = got.len();
    let repeats = attempts - got.iter().filter(|r| r.status == 204).count();
    println!(
        "webhooks: {} events delivered through the outage and 3 SIGKILLs; {attempts} requests, \
         {repeats} of them failed attempts repeated with the same webhook-id",
        completed.len()
    );
}
