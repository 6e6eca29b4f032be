//! Requests to the app as a client makes them: with a bearer token or none, answered as a
//! [`Reply`] with its body read; problem+json checks; and the few calls most tests make
//! (a scripted agent, a client tool, a run, waiting for a run's status, a user joining a
//! tenant).

use super::{DEADLINE, TestApp};
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header, request};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

/// How often [`TestApp::wait_run`] looks at the run.
const POLL: Duration = Duration::from_millis(5);

/// What a request sends as `Authorization: Bearer …`: a token, or nothing.
pub trait Auth {
    fn bearer(&self) -> Option<&str>;
}

impl Auth for str {
    fn bearer(&self) -> Option<&str> {
        Some(self)
    }
}

impl Auth for String {
    fn bearer(&self) -> Option<&str> {
        Some(self)
    }
}

/// No `Authorization` header.
pub struct Anonymous;

impl Auth for Anonymous {
    fn bearer(&self) -> Option<&str> {
        None
    }
}

/// An answer, its body read to the end.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON; `Null` when it is not JSON.
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// This answer, once its status is checked to be `status`.
    #[track_caller]
    pub fn expect_status(self, status: u16) -> Self {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        self
    }

    /// The string at `pointer` (`/run/id`) of the body; panics with the body if absent.
    pub fn str(&self, pointer: &str) -> String {
        self.body
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no string at {pointer}: {} {}", self.status, self.text))
            .to_string()
    }

    /// The `items` of a page.
    pub fn items(&self) -> &[Value] {
        self.body["items"]
            .as_array()
            .unwrap_or_else(|| panic!("not a page: {} {}", self.status, self.text))
    }

    /// `field` of every item of a page.
    pub fn item_fields(&self, field: &str) -> Vec<Value> {
        self.items().iter().map(|i| i[field].clone()).collect()
    }
}

/// Checks that `reply` is a problem+json answer with `status` and `code`, whose body
/// repeats the status and the request id of the `x-request-id` header; returns its detail.
#[track_caller]
pub fn assert_problem(reply: &Reply, status: u16, code: &str) -> String {
    assert_eq!(
        (reply.status.as_u16(), reply.body["code"].as_str()),
        (status, Some(code)),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.headers[header::CONTENT_TYPE],
        baton_api::error::PROBLEM_JSON
    );
    assert_eq!(reply.body["status"], status);
    let request_id = reply.headers["x-request-id"].to_str().expect("ASCII");
    assert_eq!(reply.body["request_id"], request_id);
    reply.body["detail"]
        .as_str()
        .expect("a problem has a detail")
        .to_string()
}

impl TestApp {
    /// `method path` with a loopback `Host` and the bearer token of `auth`, to finish with
    /// headers and a body.
    pub fn request(
        &self,
        method: Method,
        path: &str,
        auth: &(impl Auth + ?Sized),
    ) -> request::Builder {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost");
        match auth.bearer() {
            Some(token) => req.header(header::AUTHORIZATION, format!("Bearer {token}")),
            None => req,
        }
    }

    /// Sends `req` through the router and answers its response as is, its body unread
    /// (an event stream stays open while the response is held).
    pub async fn open(&self, req: Request<Body>) -> axum::response::Response {
        self.router
            .clone()
            .oneshot(req)
            .await
            .expect("the router never fails")
    }

    /// Sends `req` through the router and reads the whole answer (within [`DEADLINE`]).
    pub async fn send(&self, req: Request<Body>) -> Reply {
        let res = self.open(req).await;
        let (status, headers) = (res.status(), res.headers().clone());
        let bytes = tokio::time::timeout(DEADLINE, to_bytes(res.into_body(), usize::MAX))
            .await
            .expect("the body ends in time")
            .expect("the body is readable");
        let text = String::from_utf8(bytes.to_vec()).expect("the body is UTF-8");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn get(&self, path: &str, auth: &(impl Auth + ?Sized)) -> Reply {
        let req = self.request(Method::GET, path, auth);
        self.send(req.body(Body::empty()).expect("a request")).await
    }

    pub async fn delete(&self, path: &str, auth: &(impl Auth + ?Sized)) -> Reply {
        let req = self.request(Method::DELETE, path, auth);
        self.send(req.body(Body::empty()).expect("a request")).await
    }

    pub async fn post(&self, path: &str, auth: &(impl Auth + ?Sized), body: Value) -> Reply {
        self.send_json(Method::POST, path, auth, body).await
    }

    pub async fn put(&self, path: &str, auth: &(impl Auth + ?Sized), body: Value) -> Reply {
        self.send_json(Method::PUT, path, auth, body).await
    }

    pub async fn patch(&self, path: &str, auth: &(impl Auth + ?Sized), body: Value) -> Reply {
        self.send_json(Method::PATCH, path, auth, body).await
    }

    /// The run's stored events of type `kind` (the first page), in order.
    pub async fn events_of(
        &self,
        auth: &(impl Auth + ?Sized),
        run: &str,
        kind: &str,
    ) -> Vec<Value> {
        let events = self
            .get(&format!("/v1/runs/{run}/events"), auth)
            .await
            .expect_status(200);
        events.body["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|e| e["type"] == kind)
            .cloned()
            .collect()
    }

    /// `GET /v1/runs/{run}/events` as an event stream, resumed after `last_event_id` when
    /// given; [`TestApp::open`] holds it open, [`TestApp::send`] reads it to its end.
    pub fn events_request(
        &self,
        run: &str,
        auth: &(impl Auth + ?Sized),
        last_event_id: Option<&str>,
    ) -> Request<Body> {
        let mut req = self
            .request(Method::GET, &format!("/v1/runs/{run}/events"), auth)
            .header(header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        req.body(Body::empty()).expect("a request")
    }

    /// `method path` with `body` as JSON.
    pub async fn send_json(
        &self,
        method: Method,
        path: &str,
        auth: &(impl Auth + ?Sized),
        body: Value,
    ) -> Reply {
        let req = self
            .request(method, path, auth)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("a request");
        self.send(req).await
    }
    /// A scripted agent answering model call N with `replies[N]` (`{"content",
    /// "delay_ms", "complete_run"}`); returns its id.
    pub async fn agent(&self, auth: &(impl Auth + ?Sized), replies: Value) -> String {
        let r = self.post("/v1/agents", auth, scripted_agent(replies)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.str("/id")
    }

    /// A scripted agent (as [`Self::agent`]) that may call `tools`; returns its id.
    pub async fn agent_with_tools(
        &self,
        auth: &(impl Auth + ?Sized),
        replies: Value,
        tools: &[&str],
    ) -> String {
        let mut spec = scripted_agent(replies);
        spec["tools"] = json!(tools);
        let r = self.post("/v1/agents", auth, spec).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.str("/id")
    }

    /// A client tool named `name` (see [`client_tool`]); returns its id.
    pub async fn tool(&self, auth: &(impl Auth + ?Sized), name: &str) -> String {
        let r = self.post("/v1/tools", auth, client_tool(name)).await;
        r.expect_status(201).str("/id")
    }

    /// A run of `agent`, with a first message when given; returns its id.
    pub async fn run(
        &self,
        auth: &(impl Auth + ?Sized),
        agent: &str,
        message: Option<&str>,
    ) -> String {
        let mut body = json!({"agent_id": agent});
        if let Some(m) = message {
            body["message"] = json!(m);
        }
        let r = self.post("/v1/runs", auth, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.str("/run/id")
    }

    /// `POST /v1/runs` of `agent` with a first `message`, waiting up to `wait` seconds for
    /// its first turn; the answer unchecked.
    pub async fn run_waiting(
        &self,
        auth: &(impl Auth + ?Sized),
        agent: &str,
        message: &str,
        wait: u32,
    ) -> Reply {
        let body = json!({"agent_id": agent, "message": message, "wait": wait});
        self.post("/v1/runs", auth, body).await
    }

    /// `email` joins the tenant of `admin` with `role` as a user would: invited by the
    /// admin, it logs in with `password` (an account it has already) and accepts. Returns
    /// the session token and the new member.
    pub async fn join(
        &self,
        admin: &(impl Auth + ?Sized),
        email: &str,
        password: &str,
        role: &str,
    ) -> (String, Reply) {
        let invitation = self
            .post(
                "/v1/invitations",
                admin,
                json!({"email": email, "role": role}),
            )
            .await
            .expect_status(201)
            .str("/id");
        let session = self
            .post(
                "/v1/login",
                &super::Anonymous,
                json!({"email": email, "password": password}),
            )
            .await
            .expect_status(200)
            .str("/token");
        let member = self
            .post(
                &format!("/v1/me/invitations/{invitation}/accept"),
                &session,
                json!({}),
            )
            .await
            .expect_status(200);
        (session, member)
    }

    /// Polls the run until its status is `status`, within [`DEADLINE`]; returns it.
    pub async fn wait_run(&self, auth: &(impl Auth + ?Sized), run: &str, status: &str) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let r = self.get(&format!("/v1/runs/{run}"), auth).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            if r.body["status"] == status {
                return r.body;
            }
            assert!(
                Instant::now() < deadline,
                "the run never became {status}: {}",
                r.text
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The body of a new agent whose scripted model answers call N with `replies[N]`.
pub fn scripted_agent(replies: Value) -> Value {
    json!({"name": "scripted", "provider": {"kind": "scripted", "replies": replies}})
}

/// The body of a new client tool (the API client carries out its calls) named `name`.
pub fn client_tool(name: &str) -> Value {
    json!({"name": name, "effect": "read", "input_schema": {"type": "object"},
        "kind": {"kind": "client"}})
}
