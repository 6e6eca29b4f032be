//! Installations on a shared NATS: each keeps to the subjects under its prefix, so two of
//! them on one server never see each other's events or control messages; an account that
//! may use only `<prefix>.>` is enough; and a replica connects with user
//! and password, a token, an NKey or over TLS, never showing a secret in an error.

mod common;

use baton_bus::{NatsAuth, NatsBus, NatsOptions, NatsTls, Subjects};
use baton_core::ports::{Control, ControlMessage, EventBus};
use baton_events::{RunId, TenantId};
use baton_testkit::nats::TestNats;
use common::{event, recv};
use futures::StreamExt;
use secrecy::SecretString;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(15);

fn nats_url() -> String {
    std::env::var("BATON_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// A prefix no other test uses.
fn fresh_prefix(name: &str) -> Subjects {
    Subjects::new(&format!("{name}-{}", uuid::Uuid::new_v4().simple())).expect("valid prefix")
}

async fn install(url: &str, subjects: Subjects, auth: NatsAuth) -> NatsBus {
    let options = NatsOptions {
        subjects,
        auth,
        subscriber_buffer: 64,
        ..NatsOptions::default()
    };
    NatsBus::connect_with(url, options)
        .await
        .expect("the installation connects")
}

/// A client that sees every message on the server, confirmed subscribed.
async fn spy(url: &str) -> async_nats::Subscriber {
    let raw = async_nats::connect(url).await.expect("nats");
    let all = raw.subscribe(">").await.expect("subscribe to everything");
    let inbox = raw.new_inbox();
    let mut echo = raw.subscribe(inbox.clone()).await.expect("echo");
    raw.publish(inbox, "x".into()).await.expect("publish");
    tokio::time::timeout(WAIT, echo.next())
        .await
        .expect("the server answers");
    all
}

/// Waits until the spy sees a message on `subject`.
async fn seen(spy: &mut async_nats::Subscriber, subject: &str) {
    loop {
        let msg = tokio::time::timeout(WAIT, spy.next())
            .await
            .unwrap_or_else(|_| panic!("no message on {subject} in time"))
            .expect("the spy's connection stays up");
        if msg.subject.as_str() == subject {
            return;
        }
    }
}

#[tokio::test]
async fn two_installations_on_one_nats_never_see_each_others_events_or_control() {
    let url = nats_url();
    let (pa, pb) = (fresh_prefix("inst-a"), fresh_prefix("inst-b"));
    let a = install(&url, pa.clone(), NatsAuth::None).await;
    let b = install(&url, pb.clone(), NatsAuth::None).await;
    let mut spy = spy(&url).await;
    // The same tenant and run ids in both: only the prefix tells them apart.
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut on_a = a.subscribe(tenant, run).await.expect("subscribe");
    let mut on_b = b.subscribe(tenant, run).await.expect("subscribe");
    let mut control_a = a.subscribe_control().await.expect("control");

    // B's event and control message reach the server under B's prefix...
    let mut from_b = event(tenant, run, 1);
    from_b.data = serde_json::json!({"from": "b"});
    b.publish(&[from_b]).await;
    seen(&mut spy, &pb.event(tenant, run)).await;
    b.publish_control(&ControlMessage {
        from: "b".into(),
        control: Control::Adopt,
    })
    .await;
    seen(&mut spy, &pb.control()).await;

    // ...and by then the server has routed them to every matching subscription, ahead of
    // anything A sends next: A's own messages come first on A, so nothing of B's came.
    let mut from_a = event(tenant, run, 1);
    from_a.data = serde_json::json!({"from": "a"});
    a.publish(&[from_a]).await;
    let got = recv(&mut on_a).await.expect("A's own event");
    assert_eq!(got.data["from"], "a", "A received B's event: {got:?}");
    a.publish_control(&ControlMessage {
        from: "a".into(),
        control: Control::Adopt,
    })
    .await;
    let control = tokio::time::timeout(WAIT, control_a.recv())
        .await
        .expect("in time")
        .expect("A's own control message");
    assert_eq!(control.from, "a", "A received B's control message");

    // And the other way round, once A's event is on the server.
    seen(&mut spy, &pa.event(tenant, run)).await;
    let got = recv(&mut on_b).await.expect("B's own event");
    assert_eq!(got.data["from"], "b");
    let mut sentinel = event(tenant, run, 2);
    sentinel.data = serde_json::json!({"from": "b"});
    b.publish(&[sentinel]).await;
    let got = recv(&mut on_b).await.expect("B's second event");
    assert_eq!(
        (got.version, &got.data["from"]),
        (2, &serde_json::json!("b")),
        "B received A's event: {got:?}"
    );
}

/// An account that may publish and subscribe under `prefix` only.
fn account(user: &str, password: &str, prefix: &Subjects) -> String {
    format!(
        r#"authorization {{
  users = [
    {{ user: "{user}", password: "{password}",
       permissions: {{ publish: ["{all}"], subscribe: ["{all}"] }} }}
  ]
}}"#,
        all = prefix.all()
    )
}

#[tokio::test]
async fn an_account_limited_to_the_prefix_is_all_an_installation_needs() {
    let prefix = fresh_prefix("acct");
    let nats = TestNats::start_with_config(&account("baton", "pw-8f2e", &prefix))
        .await
        .expect("nats-server");
    let auth = || NatsAuth::UserPassword {
        user: "baton".into(),
        password: SecretString::from("pw-8f2e"),
    };
    let a = install(&nats.url(), prefix.clone(), auth()).await;
    let b = install(&nats.url(), prefix.clone(), auth()).await;
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = b.subscribe(tenant, run).await.expect("subscribe");
    let mut control = b.subscribe_control().await.expect("control");
    a.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));
    a.publish_control(&ControlMessage {
        from: "a".into(),
        control: Control::Adopt,
    })
    .await;
    let got = tokio::time::timeout(WAIT, control.recv())
        .await
        .expect("in time");
    assert_eq!(got.map(|c| c.from).as_deref(), Some("a"));

    // Another prefix is outside the account: subscribing there is refused at start-up.
    let outside = NatsBus::connect_with(
        &nats.url(),
        NatsOptions {
            subjects: fresh_prefix("elsewhere"),
            auth: auth(),
            connect_timeout: Duration::from_secs(2),
            ..NatsOptions::default()
        },
    )
    .await;
    assert!(
        outside.is_err(),
        "an installation outside its account must not start"
    );
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_naming_it() {
    let prefix = fresh_prefix("pw");
    let nats = TestNats::start_with_config(&account("baton", "right-9a1c", &prefix))
        .await
        .expect("nats-server");
    let refused = NatsBus::connect_with(
        &nats.url(),
        NatsOptions {
            subjects: prefix,
            auth: NatsAuth::UserPassword {
                user: "baton".into(),
                password: SecretString::from("wrong-7d3b"),
            },
            connect_timeout: Duration::from_secs(2),
            ..NatsOptions::default()
        },
    )
    .await;
    let error = refused.err().expect("refused").to_string();
    assert!(
        !error.contains("wrong-7d3b") && !error.contains("right-9a1c"),
        "{error}"
    );
}

#[tokio::test]
async fn a_token_and_an_nkey_authenticate_a_replica() {
    let token = format!("tok-{}", uuid::Uuid::new_v4().simple());
    let nats = TestNats::start_with_config(&format!("authorization {{ token: \"{token}\" }}"))
        .await
        .expect("nats-server");
    let bus = install(
        &nats.url(),
        fresh_prefix("tok"),
        NatsAuth::Token(SecretString::from(token)),
    )
    .await;
    assert!(bus.ping().await.is_ok());
    let anonymous = NatsBus::connect_with(
        &nats.url(),
        NatsOptions {
            connect_timeout: Duration::from_secs(2),
            ..NatsOptions::default()
        },
    )
    .await;
    assert!(anonymous.is_err(), "the server requires the token");

    let user = nkeys::KeyPair::new_user();
    let nats = TestNats::start_with_config(&format!(
        "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}",
        user.public_key()
    ))
    .await
    .expect("nats-server");
    let seed = user.seed().expect("a user key has a seed");
    let bus = install(
        &nats.url(),
        fresh_prefix("nkey"),
        NatsAuth::NKey(SecretString::from(seed)),
    )
    .await;
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = bus.subscribe(tenant, run).await.expect("subscribe");
    bus.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));
}

/// A CA and a certificate for 127.0.0.1 it signs, as PEM files in `dir`, made with the
/// `openssl` command line.
fn certificates(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

#[tokio::test]
async fn a_replica_reaches_nats_over_tls_with_the_installations_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let nats = TestNats::start_with_config(&format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\" }}",
        cert.display(),
        key.display()
    ))
    .await
    .expect("nats-server");
    let tls = NatsTls {
        required: true,
        ca_file: Some(ca),
        client_cert: None,
    };
    let bus = NatsBus::connect_with(
        &nats.url(),
        NatsOptions {
            subjects: fresh_prefix("tls"),
            tls: tls.clone(),
            ..NatsOptions::default()
        },
    )
    .await
    .expect("connects over TLS");
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = bus.subscribe(tenant, run).await.expect("subscribe");
    bus.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));

    // Without the installation's CA the server's certificate is not trusted.
    let untrusted = NatsBus::connect_with(
        &nats.url(),
        NatsOptions {
            tls: NatsTls {
                ca_file: None,
                ..tls
            },
            connect_timeout: Duration::from_secs(2),
            ..NatsOptions::default()
        },
    )
    .await;
    assert!(
        untrusted.is_err(),
        "a certificate of an unknown CA is refused"
    );
}
