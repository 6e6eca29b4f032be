//! Credentials end what they opened, on every replica: an event stream opened on one
//! replica with an API key ends within a second of the key's revocation on another, and
//! a stream of a key that expires ends at its expiry.

use crate::support::{SCHEDULING_MARGIN, next_event, start_cluster};
use baton_testkit::Api;
use serde_json::json;
use std::time::{Duration, Instant};

/// How long a stream may outlive its credentials.
const WITHIN: Duration = Duration::from_secs(1);

/// Reads the stream's events, which the run does not produce any more of, until it ends;
/// returns how long that took from `since`, or panics after `limit`.
async fn ended_after(
    stream: &mut baton_testkit::api::sse::Stream,
    since: Instant,
    limit: Duration,
) -> Duration {
    tokio::time::timeout(limit, async { while next_event(stream).await.is_some() {} })
        .await
        .unwrap_or_else(|_| {
            panic!("the stream was still open {limit:?} after its credentials ended")
        });
    since.elapsed()
}

/// A new API key of `role` made through `admin`; returns its id and a client of
/// `replica`'s API holding it.
async fn key(admin: &Api, base: &str, body: serde_json::Value) -> (String, Api) {
    let created = admin.post("/v1/api-keys", body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["key"]["id"]
        .as_str()
        .expect("the key's id")
        .to_string();
    let token = created.body["token"]
        .as_str()
        .expect("the token")
        .to_string();
    (id, Api::new(base, Some(token)))
}

#[tokio::test]
async fn a_key_revoked_on_one_replica_ends_its_stream_on_another_within_a_second() {
    let (cluster, apis) = start_cluster(2, &[], None).await;
    let agent = apis[0].agent(&[("x", 0, false)]).await;
    // A run waiting for a message: its stream stays open.
    let run = apis[0].run(&agent, None).await;
    let (id, reader) = key(
        &apis[0],
        cluster.base_url(1),
        json!({"name": "reader", "role": "viewer"}),
    )
    .await;
    let mut stream = reader.sse(&run, None).await.expect("a stream on replica 1");
    assert_eq!(
        next_event(&mut stream).await.map(|e| e.event_type),
        Some("run.created".to_string())
    );
    let since = Instant::now();
    let revoked = apis[0]
        .send(apis[0].req(reqwest::Method::DELETE, &format!("/v1/api-keys/{id}")))
        .await;
    assert_eq!(revoked.status, 204, "{}", revoked.body);
    let took = ended_after(&mut stream, since, WITHIN + SCHEDULING_MARGIN).await;
    println!("stream on replica 1 ended {took:?} after the key's revocation on replica 0");
    // And the key opens nothing any more.
    let again = reader.sse_req(&run, None).send().await.expect("request");
    assert_eq!(again.status().as_u16(), 401);
}

#[tokio::test]
async fn a_stream_ends_when_its_key_expires() {
    let (cluster, apis) = start_cluster(1, &[], None).await;
    let agent = apis[0].agent(&[("x", 0, false)]).await;
    let run = apis[0].run(&agent, None).await;
    let expires_at = chrono::Utc::now() + chrono::TimeDelta::seconds(3);
    let (_, reader) = key(
        &apis[0],
        cluster.base_url(0),
        json!({"name": "brief", "role": "viewer", "expires_at": expires_at.to_rfc3339()}),
    )
    .await;
    let mut stream = reader.sse(&run, None).await.expect("a stream");
    assert!(next_event(&mut stream).await.is_some());
    let left = (expires_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    let opened = Instant::now();
    let took = ended_after(&mut stream, opened, left + WITHIN + SCHEDULING_MARGIN).await;
    assert!(
        took + Duration::from_millis(50) >= left,
        "the stream ended {took:?} after it opened, before its key expired ({left:?})"
    );
}
