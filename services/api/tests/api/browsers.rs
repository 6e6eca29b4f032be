//! What a browser page uses: a login session kept in an `HttpOnly` cookie, whose requests
//! that change anything must carry the session's anti-CSRF token; and stream tickets,
//! which open one run's event stream once, before they expire, as the credentials that
//! asked for them.

use crate::support::{Anonymous, Reply, TICKET_LIFETIME, TestApp, assert_problem};
use axum::body::{Body, to_bytes};
use axum::http::{Method, header};
use baton_core::Role;
use baton_core::crypto::tokens;
use serde_json::{Value, json};
use std::time::Duration;

const EMAIL: &str = "ada@example.com";
const PASSWORD: &str = "correct horse battery staple";

/// A browser's session: its cookie and the anti-CSRF token the login answered.
struct Browser {
    cookie: String,
    csrf: String,
}

/// `email` joins `owner`'s tenant as `role`, then logs in from a page served by `host`
/// asking for a cookie: the login's answer and the browser that keeps it.
async fn log_in(app: &TestApp, owner: &str, role: &str, host: &str) -> (Reply, Browser) {
    app.user(EMAIL, PASSWORD).await;
    app.join(owner, EMAIL, PASSWORD, role).await;
    let req = Request::login(host);
    let login = app.send(req).await.expect_status(200);
    let set = login.headers[header::SET_COOKIE]
        .to_str()
        .expect("ASCII")
        .to_string();
    let pair = set.split(';').next().expect("name=value").to_string();
    let csrf = login.str("/csrf_token");
    (login, Browser { cookie: pair, csrf })
}

/// Requests as a browser sends them.
struct Request;

impl Request {
    fn login(host: &str) -> axum::http::Request<Body> {
        axum::http::Request::builder()
            .method(Method::POST)
            .uri("/v1/login")
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(
                json!({"email": EMAIL, "password": PASSWORD, "cookie": true}).to_string(),
            ))
            .expect("a request")
    }

    /// `method path` with the browser's cookie, its anti-CSRF header when `csrf` is given,
    /// and `body` as JSON.
    fn with_cookie(
        method: Method,
        path: &str,
        browser: &Browser,
        csrf: Option<&str>,
        body: Option<Value>,
    ) -> axum::http::Request<Body> {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(header::COOKIE, format!("theme=dark; {}", browser.cookie));
        if let Some(csrf) = csrf {
            req = req.header("baton-csrf", csrf);
        }
        match body {
            Some(body) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string())),
            None => req.body(Body::empty()),
        }
        .expect("a request")
    }
}

#[tokio::test]
async fn a_cookie_login_keeps_the_token_from_scripts_and_the_cookie_secure() {
    let (app, t) = TestApp::with_tenant().await;
    let (login, browser) = log_in(&app, &t.owner, "member", "localhost:8591").await;
    assert_eq!(
        login.body["token"],
        Value::Null,
        "scripts never see the token"
    );
    let set = login.headers[header::SET_COOKIE].to_str().expect("ASCII");
    let token = browser
        .cookie
        .strip_prefix("__Host-baton_session=")
        .expect("the session cookie");
    assert!(tokens::is_well_formed_session(token), "{set}");
    // Never over plain HTTP (browsers keep a Secure cookie of a loopback page), and with
    // the `__Host-` prefix only as set by this host for the whole site.
    for attribute in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=3600",
    ] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    assert!(!set.contains("Domain"), "{set}");
    assert_eq!(browser.csrf, tokens::csrf_token(token));

    // The cookie authenticates reads, and `me` answers the anti-CSRF token again for a
    // page loaded anew; a bearer login answers none.
    let me = app
        .send(Request::with_cookie(
            Method::GET,
            "/v1/me",
            &browser,
            None,
            None,
        ))
        .await
        .expect_status(200);
    assert_eq!(me.body["csrf_token"], json!(browser.csrf));
    assert_eq!(me.body["tenants"][0]["role"], "member");
    let runs = Request::with_cookie(Method::GET, "/v1/runs", &browser, None, None);
    app.send(runs).await.expect_status(200);
    let bearer = app
        .post(
            "/v1/login",
            &Anonymous,
            json!({"email": EMAIL, "password": PASSWORD}),
        )
        .await
        .expect_status(200);
    assert_eq!(bearer.body["csrf_token"], Value::Null);
    let me = app.get("/v1/me", &bearer.str("/token")).await;
    assert_eq!(me.body["csrf_token"], Value::Null);
}

#[tokio::test]
async fn with_the_cookie_nothing_changes_without_the_sessions_csrf_token() {
    let (app, t) = TestApp::with_tenant().await;
    let (_, browser) = log_in(&app, &t.owner, "member", "localhost").await;
    let agent = app.agent(&t.owner, json!([{"content": "hi"}])).await;
    let create = |csrf: Option<&str>| {
        Request::with_cookie(
            Method::POST,
            "/v1/runs",
            &browser,
            csrf,
            Some(json!({"agent_id": agent})),
        )
    };
    let other = tokens::csrf_token(&tokens::issue_session_token().token);
    for csrf in [None, Some(""), Some(other.as_str())] {
        let detail = assert_problem(&app.send(create(csrf)).await, 403, "csrf_failed");
        assert!(detail.contains("Baton-CSRF"), "{detail}");
    }
    let runs = app.get("/v1/runs", &t.owner).await.expect_status(200);
    assert!(runs.items().is_empty(), "a refused request wrote nothing");
    app.send(create(Some(&browser.csrf)))
        .await
        .expect_status(201);

    // Logging out needs the token too; then the browser forgets the cookie and the
    // session is over.
    let logout = |csrf| Request::with_cookie(Method::POST, "/v1/logout", &browser, csrf, None);
    assert_problem(&app.send(logout(None)).await, 403, "csrf_failed");
    let out = app
        .send(logout(Some(&browser.csrf)))
        .await
        .expect_status(204);
    let forget = out.headers[header::SET_COOKIE].to_str().expect("ASCII");
    assert!(
        forget.starts_with("__Host-baton_session=;")
            && forget.contains("Max-Age=0")
            && forget.contains("Secure"),
        "{forget}"
    );
    let me = Request::with_cookie(Method::GET, "/v1/me", &browser, None, None);
    let detail = assert_problem(&app.send(me).await, 401, "unauthorized");
    assert!(detail.contains("session has ended"), "{detail}");
}

/// A ticket to `run` asked for with `auth`.
async fn ticket(app: &TestApp, run: &str, auth: &str) -> Reply {
    let req = app.request(
        Method::POST,
        &format!("/v1/runs/{run}/stream-tickets"),
        auth,
    );
    app.send(req.body(Body::empty()).expect("a request")).await
}

/// `url` opened as `EventSource` does: no credentials but what the URL holds.
fn event_source(url: &str) -> axum::http::Request<Body> {
    axum::http::Request::builder()
        .uri(url)
        .header(header::HOST, "localhost")
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .expect("a request")
}

#[tokio::test]
async fn a_stream_ticket_opens_its_runs_events_once() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(&t.owner, json!([{"content": "Bye", "complete_run": true}]))
        .await;
    let run = app.run(&t.owner, &agent, Some("Hi")).await;
    app.wait_run(&t.owner, &run, "completed").await;
    // A viewer may ask: it may read the run.
    let viewer = app.key(t.id, Role::Viewer).await;
    let issued = ticket(&app, &run, &viewer).await.expect_status(201);
    let token = issued.str("/ticket");
    assert!(tokens::is_well_formed_ticket(&token), "{token}");
    let url = issued.str("/url");
    assert_eq!(url, format!("/v1/runs/{run}/events?ticket={token}"));

    let stream = app.send(event_source(&url)).await.expect_status(200);
    for kind in ["run.created", "message.appended", "run.completed"] {
        assert!(
            stream.text.contains(&format!("event: {kind}\n")),
            "{kind} missing from {}",
            stream.text
        );
    }
    let again = app.send(event_source(&url)).await;
    let detail = assert_problem(&again, 401, "unauthorized");
    assert!(detail.contains("used already"), "{detail}");
}

#[tokio::test]
async fn a_ticket_opens_nothing_expired_for_another_run_or_with_a_header_too() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let other = app.run(&t.owner, &agent, None).await;

    let expired = ticket(&app, &run, &t.owner).await.expect_status(201);
    tokio::time::sleep(TICKET_LIFETIME.to_std().expect("positive") + Duration::from_millis(200))
        .await;
    let r = app.send(event_source(&expired.str("/url"))).await;
    assert!(assert_problem(&r, 401, "unauthorized").contains("expired"));

    let elsewhere = ticket(&app, &run, &t.owner).await.str("/ticket");
    let r = app
        .send(event_source(&format!(
            "/v1/runs/{other}/events?ticket={elsewhere}"
        )))
        .await;
    assert!(assert_problem(&r, 401, "unauthorized").contains("another run"));

    let both = ticket(&app, &run, &t.owner).await.str("/url");
    let req = app
        .request(Method::GET, &both, &t.owner)
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .expect("a request");
    assert_problem(&app.send(req).await, 400, "invalid_request");

    for forged in ["bt_short".to_string(), tokens::issue_ticket().token] {
        let r = app
            .send(event_source(&format!(
                "/v1/runs/{run}/events?ticket={forged}"
            )))
            .await;
        assert_problem(&r, 401, "unauthorized");
    }
}

#[tokio::test]
async fn a_ticket_acts_as_its_credentials_only_in_their_tenant_and_while_they_last() {
    let app = TestApp::new().await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    let agent = app.agent(&a.owner, json!([{"content": "x"}])).await;
    let run = app.run(&a.owner, &agent, None).await;
    // Another tenant's run is not there to ask about.
    assert_problem(&ticket(&app, &run, &b.owner).await, 404, "not_found");

    // A revoked key's ticket opens nothing.
    let created = app
        .post(
            "/v1/api-keys",
            &a.owner,
            json!({"name": "page", "role": "viewer"}),
        )
        .await
        .expect_status(201);
    let url = ticket(&app, &run, &created.str("/token")).await.str("/url");
    let id = created.str("/key/id");
    app.delete(&format!("/v1/api-keys/{id}"), &a.owner)
        .await
        .expect_status(204);
    let r = app.send(event_source(&url)).await;
    assert!(assert_problem(&r, 401, "unauthorized").contains("revoked"));

    // A session's ticket opens a stream that ends when the session does.
    app.user(EMAIL, PASSWORD).await;
    let (session, _) = app.join(&a.owner, EMAIL, PASSWORD, "viewer").await;
    let url = ticket(&app, &run, &session).await.str("/url");
    let stream = app.open(event_source(&url)).await;
    assert_eq!(stream.status(), 200);
    let req = app.request(Method::POST, "/v1/logout", &session);
    app.send(req.body(Body::empty()).expect("a request"))
        .await
        .expect_status(204);
    let ended = tokio::time::timeout(
        Duration::from_secs(1),
        to_bytes(stream.into_body(), usize::MAX),
    )
    .await;
    assert!(ended.is_ok(), "the ticket's stream outlived its session");
}

#[tokio::test]
async fn the_local_owner_gets_tickets_too() {
    let (app, _) = TestApp::local_owner().await;
    let agent = app
        .agent(
            &Anonymous,
            json!([{"content": "Bye", "complete_run": true}]),
        )
        .await;
    let run = app.run(&Anonymous, &agent, Some("Hi")).await;
    app.wait_run(&Anonymous, &run, "completed").await;
    let req = app.request(
        Method::POST,
        &format!("/v1/runs/{run}/stream-tickets"),
        &Anonymous,
    );
    let issued = app
        .send(req.body(Body::empty()).expect("a request"))
        .await
        .expect_status(201);
    let stream = app
        .send(event_source(&issued.str("/url")))
        .await
        .expect_status(200);
    assert!(
        stream.text.contains("event: run.completed"),
        "{}",
        stream.text
    );
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_under_its_own_policy() {
    let (app, _) = TestApp::with_tenant().await;
    for (path, media_type) in [
        ("/console", "text/html"),
        ("/console/", "text/html"),
        ("/console/app.js", "text/javascript"),
        ("/console/app.css", "text/css"),
    ] {
        // The page loads without credentials: it asks who is there, and shows a login.
        let r = app.get(path, &Anonymous).await.expect_status(200);
        let got = r.headers[header::CONTENT_TYPE].to_str().expect("ASCII");
        assert!(got.starts_with(media_type), "{path}: {got}");
        let csp = r.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("ASCII");
        assert_eq!(csp, baton_api::console::CONSOLE_CSP, "{path}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY");
    }
    let page = app.get("/console", &Anonymous).await;
    assert!(
        page.text.contains(r#"src="/console/app.js""#),
        "{}",
        page.text
    );
    assert!(
        !page.text.contains("http"),
        "the page names no other origin"
    );
    assert_problem(
        &app.get("/console/../openapi.json", &Anonymous).await,
        404,
        "route_not_found",
    );
    assert_problem(
        &app.get("/console/secrets.js", &Anonymous).await,
        404,
        "route_not_found",
    );
    let root = app.get("/", &Anonymous).await;
    assert_eq!(root.status.as_u16(), 303);
    assert_eq!(root.headers[header::LOCATION], "/console");
}

#[tokio::test]
async fn a_stream_opened_with_the_cookie_ends_at_logout() {
    let (app, t) = TestApp::with_tenant().await;
    let (_, browser) = log_in(&app, &t.owner, "viewer", "localhost").await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let mut open = Request::with_cookie(
        Method::GET,
        &format!("/v1/runs/{run}/events"),
        &browser,
        None,
        None,
    );
    open.headers_mut().insert(
        header::ACCEPT,
        header::HeaderValue::from_static("text/event-stream"),
    );
    let stream = app.open(open).await;
    assert_eq!(stream.status(), 200);
    let logout = Request::with_cookie(
        Method::POST,
        "/v1/logout",
        &browser,
        Some(&browser.csrf),
        None,
    );
    app.send(logout).await.expect_status(204);
    let ended = tokio::time::timeout(
        Duration::from_secs(1),
        to_bytes(stream.into_body(), usize::MAX),
    )
    .await;
    assert!(ended.is_ok(), "the cookie's stream outlived its session");
}

#[tokio::test]
async fn the_cookie_yields_to_authorization_and_is_refused_twice_over() {
    let (app, t) = TestApp::with_tenant().await;
    let (_, browser) = log_in(&app, &t.owner, "viewer", "localhost").await;
    // With a bearer key the cookie is not read: the key's role acts (the viewer's cookie
    // could not create a run), and no CSRF header is asked for.
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let mut req = Request::with_cookie(
        Method::POST,
        "/v1/runs",
        &browser,
        None,
        Some(json!({"agent_id": agent})),
    );
    req.headers_mut().insert(
        header::AUTHORIZATION,
        header::HeaderValue::from_str(&format!("Bearer {}", t.owner)).expect("a header"),
    );
    app.send(req).await.expect_status(201);
    // Two session cookies (one planted beside the real one) are refused, whichever
    // comes first.
    let planted = tokens::issue_session_token().token;
    let twice = Browser {
        cookie: format!("__Host-baton_session={planted}; {}", browser.cookie),
        csrf: browser.csrf.clone(),
    };
    let me = Request::with_cookie(Method::GET, "/v1/me", &twice, None, None);
    let detail = assert_problem(&app.send(me).await, 401, "unauthorized");
    assert!(detail.contains("several session cookies"), "{detail}");
    // A cookie of another name is no session.
    let other = Browser {
        cookie: browser
            .cookie
            .replace("__Host-baton_session", "baton_session"),
        csrf: browser.csrf.clone(),
    };
    let me = Request::with_cookie(Method::GET, "/v1/me", &other, None, None);
    assert_problem(&app.send(me).await, 401, "unauthorized");
}
