//! A run's files (`/v1/runs/{run_id}/files`): list them, download one, upload one into
//! `uploads/`. The path after `files/` is percent-decoded by the router and then checked
//! by `baton_core::workspace::path` (no `..`, no absolute paths, backslashes, control
//! characters or overlong names), so no spelling reaches outside the run's workspace.
//!
//! Downloads are served so a browser never runs them: `Content-Security-Policy: sandbox`
//! and `nosniff` on every file, and HTML, SVG, XML and files of unknown type only as an
//! attachment.

use super::{FilePage, PageQuery};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MATCH,
    IF_NONE_MATCH, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use baton_core::RunId;
use baton_core::model::WorkspaceFile;
use baton_core::workspace::{Precondition, path};

/// The run's files in path order (`cursor`: the previous page's last path).
#[utoipa::path(get, path = "/v1/runs/{run_id}/files", operation_id = "listRunFiles", tag = "files",
    params(("run_id" = RunId, Path, description = "Run id"), PageQuery),
    responses((status = 200, body = FilePage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(run): ApiPath<RunId>,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<axum::Json<FilePage>> {
    let page = st.workspaces.list_files(&p, run, q.cursor, q.limit).await?;
    Ok(axum::Json(page.into()))
}

/// Download a file of the run. Its type comes from its name; HTML, SVG, XML and unknown
/// types come as attachments, and nothing is run by a browser (`CSP: sandbox`).
#[utoipa::path(get, path = "/v1/runs/{run_id}/files/{*path}", operation_id = "getRunFile", tag = "files",
    params(("run_id" = RunId, Path, description = "Run id"),
        ("path" = String, Path, description = "The file's path in the workspace (it may hold `/`)")),
    responses((status = 200, description = "The file's content",
            content_type = "application/octet-stream", body = Vec<u8>,
            headers(("ETag" = String, description = "The content's SHA-256, quoted"))),
        (status = "4XX", body = Problem)))]
pub async fn download(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((run, file)): ApiPath<(RunId, String)>,
) -> ApiResult<Response> {
    let found = st.workspaces.read_file(&p, run, &file).await?;
    let kind = mime_guess::from_path(&found.file.path).first();
    let inline = kind.as_ref().is_some_and(|m| {
        let essence = m.essence_str();
        !(essence.contains("html") || essence.contains("xml") || essence.contains("svg"))
    });
    let content_type = kind.map_or_else(
        || "application/octet-stream".to_string(),
        |m| m.essence_str().to_string(),
    );
    let disposition = disposition(
        if inline { "inline" } else { "attachment" },
        path::file_name(&found.file.path),
    );
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, header(&content_type));
    headers.insert(CONTENT_LENGTH, HeaderValue::from(found.content.len()));
    headers.insert(CONTENT_DISPOSITION, header(&disposition));
    headers.insert(ETAG, header(&format!("\"{}\"", found.file.sha256)));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    Ok((StatusCode::OK, headers, Body::from(found.content)).into_response())
}

/// Upload a file into the run's workspace, under `uploads/`, as a `workspace.changed`
/// event. `If-Match: "<sha256>"` replaces only that content; `If-None-Match: *` only
/// creates. The same content again changes nothing.
#[utoipa::path(put, path = "/v1/runs/{run_id}/files/{*path}", operation_id = "putRunFile", tag = "files",
    params(("run_id" = RunId, Path, description = "Run id"),
        ("path" = String, Path, description = "Where the file goes: `uploads/…`"),
        ("If-Match" = Option<String>, Header, description = "The content's quoted SHA-256 the file must hold now"),
        ("If-None-Match" = Option<String>, Header, description = "`*`: only if there is no file at the path")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The file's content, up to `workspaces.max_file_bytes`"),
    responses((status = 201, body = WorkspaceFile, description = "A new file"),
        (status = 200, body = WorkspaceFile, description = "The file's new content (or the same again)"),
        (status = "4XX", body = Problem)))]
pub async fn upload(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((run, file)): ApiPath<(RunId, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let precondition = precondition(&headers)?;
    let limit = usize::try_from(st.workspaces.limits.max_file_bytes).unwrap_or(usize::MAX);
    let content = axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            Code::PayloadTooLarge,
            format!("the file is larger than the {limit} bytes a file may hold"),
        )
    })?;
    let uploaded = st
        .workspaces
        .upload(&p, run, &file, content.to_vec(), precondition)
        .await?;
    let status = if uploaded.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let etag = header(&format!("\"{}\"", uploaded.file.sha256));
    Ok((status, [(ETAG, etag)], axum::Json(uploaded.file)).into_response())
}

/// The upload's condition, from `If-Match` or `If-None-Match`.
fn precondition(headers: &HeaderMap) -> Result<Precondition, ApiError> {
    let bad = |why: &str| ApiError::new(Code::InvalidRequest, why.to_string());
    if let Some(v) = headers.get(IF_NONE_MATCH) {
        return match v.to_str().map(str::trim) {
            Ok("*") => Ok(Precondition::Absent),
            _ => Err(bad("If-None-Match takes only *")),
        };
    }
    let Some(v) = headers.get(IF_MATCH) else {
        return Ok(Precondition::None);
    };
    let tag = v.to_str().map(str::trim).unwrap_or_default();
    let sha = tag
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|t| t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()));
    match sha {
        Some(sha) => Ok(Precondition::Matches(sha.to_ascii_lowercase())),
        None => Err(bad(
            "If-Match takes one quoted SHA-256 (an ETag of the file)",
        )),
    }
}

/// `Content-Disposition` with the file's name: an ASCII fallback without quotes or
/// backslashes, and the exact name percent-encoded (RFC 6266, RFC 8187).
fn disposition(kind: &str, name: &str) -> String {
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{kind}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

/// A header value from text made of visible ASCII (a MIME type, a quoted hash, a
/// disposition whose name is escaped).
fn header(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disposition_escapes_quotes_and_encodes_the_exact_name() {
        let d = disposition("attachment", "r\"e\\p ö.html");
        assert_eq!(
            d,
            "attachment; filename=\"r_e_p _.html\"; filename*=UTF-8''r%22e%5Cp%20%C3%B6.html"
        );
        assert!(HeaderValue::from_str(&d).is_ok());
    }

    #[test]
    fn preconditions_are_parsed_or_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(precondition(&h).expect("none"), Precondition::None);
        h.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert_eq!(precondition(&h).expect("absent"), Precondition::Absent);
        h.insert(IF_NONE_MATCH, HeaderValue::from_static("\"abc\""));
        assert!(precondition(&h).is_err());
        let mut h = HeaderMap::new();
        let sha = "A".repeat(64);
        h.insert(IF_MATCH, header(&format!("\"{sha}\"")));
        assert_eq!(
            precondition(&h).expect("match"),
            Precondition::Matches("a".repeat(64))
        );
        h.insert(IF_MATCH, HeaderValue::from_static("abc"));
        assert!(precondition(&h).is_err());
    }
}
