//! The web console at `/console`: three files (a page, its script and its stylesheet)
//! built into the binary, served on the API's own origin, so the console needs no CORS
//! and no set-up, and loads nothing from anywhere else. It uses only the public API
//! (`console/app.js`).
//!
//! Its answers carry their own `Content-Security-Policy`: scripts, styles and requests
//! only from this origin, no inline script, no frames, no plug-ins; the API's headers
//! (`nosniff`, `DENY` framing) apply as to every answer.

use crate::error::{ApiError, Code};
use axum::Router;
use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// What the console's page may load and do.
pub const CONSOLE_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'";

/// The console's files: name, media type, contents.
const FILES: [(&str, &str, &str); 3] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../console/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../console/app.css"),
    ),
];

/// `/console` (the page), `/console/{file}` (its script and stylesheet), and `/` sends a
/// browser to the console.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(|| async { file("index.html") }))
        .route("/console/", get(|| async { file("index.html") }))
        .route(
            "/console/{file}",
            get(|Path(name): Path<String>| async move { file(&name) }),
        )
}

fn file(name: &str) -> Response {
    let Some((_, media_type, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return ApiError::new(Code::RouteNotFound, "no such console file").into_response();
    };
    (
        [
            (CONTENT_TYPE, *media_type),
            (CONTENT_SECURITY_POLICY, CONSOLE_CSP),
            // A new build's console is picked up at once.
            (CACHE_CONTROL, "no-cache"),
        ],
        *body,
    )
        .into_response()
}
