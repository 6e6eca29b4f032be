//! `/v1/runs/{run_id}/files`: members upload into `uploads/` and viewers read; every
//! traversal spelling is refused before anything is stored; quotas and preconditions
//! refuse a write whole; downloads never run in a browser; another tenant's run is not
//! found; an upload is a `workspace.changed` event of the run.

use crate::support::{TestApp, assert_problem};
use axum::body::Body;
use axum::http::{Method, header};
use baton_core::Role;
use serde_json::json;

impl TestApp {
    /// `PUT` of `content` at `path` of `run`, with `headers`.
    async fn upload(
        &self,
        auth: &str,
        run: &str,
        path: &str,
        content: &str,
        headers: &[(&str, &str)],
    ) -> crate::support::Reply {
        let mut req = self.request(Method::PUT, &format!("/v1/runs/{run}/files/{path}"), auth);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        self.send(
            req.body(Body::from(content.to_string()))
                .expect("a request"),
        )
        .await
    }
}

#[tokio::test]
async fn members_upload_viewers_read_and_other_tenants_find_nothing() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let viewer = app.key(t.id, Role::Viewer).await;
    let member = app.key(t.id, Role::Member).await;

    let r = app
        .upload(&viewer, &run, "uploads/a.csv", "a,b\n", &[])
        .await;
    assert_problem(&r, 403, "forbidden");
    let r = app
        .upload(&member, &run, "uploads/a.csv", "a,b\n", &[])
        .await;
    let r = r.expect_status(201);
    let sha = r.str("/sha256");
    assert_eq!(r.body["path"], "uploads/a.csv");
    assert_eq!(r.body["size"], 4);
    assert_eq!(r.headers[header::ETAG], format!("\"{sha}\"").as_str());
    // The same content again changes nothing; new content is a change.
    let again = app
        .upload(&member, &run, "uploads/a.csv", "a,b\n", &[])
        .await;
    assert_eq!(again.expect_status(200).body["version"], r.body["version"]);
    app.upload(&member, &run, "uploads/a.csv", "a,b\n1,2\n", &[])
        .await
        .expect_status(200);

    let list = app.get(&format!("/v1/runs/{run}/files"), &viewer).await;
    assert_eq!(
        list.expect_status(200).item_fields("path"),
        [json!("uploads/a.csv")]
    );
    let file = app
        .get(&format!("/v1/runs/{run}/files/uploads/a.csv"), &viewer)
        .await
        .expect_status(200);
    assert_eq!(file.text, "a,b\n1,2\n");
    assert_eq!(file.headers[header::CONTENT_TYPE], "text/csv");
    assert!(
        file.headers["content-security-policy"]
            .to_str()
            .expect("ascii")
            .starts_with("sandbox")
    );
    assert_eq!(file.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");

    // The changes are events of the run, in order.
    let events = app.events_of(&t.owner, &run, "workspace.changed").await;
    let changes: Vec<_> = events
        .iter()
        .map(|e| e["data"]["changes"][0]["change"].clone())
        .collect();
    assert_eq!(changes, [json!("added"), json!("modified")]);

    let other = app.tenant().await;
    for path in [
        format!("/v1/runs/{run}/files"),
        format!("/v1/runs/{run}/files/uploads/a.csv"),
    ] {
        assert_problem(&app.get(&path, &other.owner).await, 404, "not_found");
    }
    let r = app
        .upload(&other.owner, &run, "uploads/a.csv", "theirs", &[])
        .await;
    assert_problem(&r, 404, "not_found");
    let missing = app
        .get(&format!("/v1/runs/{run}/files/uploads/b.csv"), &viewer)
        .await;
    assert_problem(&missing, 404, "not_found");
}

#[tokio::test]
async fn every_traversal_spelling_is_refused_and_nothing_is_stored() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let spellings = [
        "uploads/%2e%2e/x",
        "uploads/%2E%2E/%2E%2E/etc/passwd",
        "uploads/..%2F..%2Fx",
        "uploads%2F..%2F..%2Fx",
        "uploads/./x",
        "%2Fetc%2Fpasswd",
        "/etc/passwd",
        "uploads/..%5C..%5Cx",
        "uploads/a%00b",
        "uploads/a%0Ab",
        "uploads//x",
        "uploads/",
    ];
    for path in spellings {
        let r = app.upload(&t.owner, &run, path, "x", &[]).await;
        assert_problem(&r, 400, "invalid_path");
        let r = app
            .get(&format!("/v1/runs/{run}/files/{path}"), &t.owner)
            .await;
        assert_problem(&r, 400, "invalid_path");
    }
    let long = format!("uploads/{}", "n".repeat(256));
    assert_problem(
        &app.upload(&t.owner, &run, &long, "x", &[]).await,
        400,
        "invalid_path",
    );
    // Outside uploads/: refused, with where it may go.
    let r = app.upload(&t.owner, &run, "outputs/x.txt", "x", &[]).await;
    let detail = assert_problem(&r, 400, "invalid_path");
    assert!(detail.contains("uploads/x.txt"), "{detail}");
    let list = app.get(&format!("/v1/runs/{run}/files"), &t.owner).await;
    assert!(list.expect_status(200).items().is_empty());
}

#[tokio::test]
async fn quotas_and_preconditions_refuse_a_write_whole() {
    let (app, t) = TestApp::with_tenant().await;
    let limits = crate::support::workspace_limits();
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;

    let big = "x".repeat(limits.max_file_bytes as usize + 1);
    let r = app
        .upload(&t.owner, &run, "uploads/big.bin", &big, &[])
        .await;
    assert_problem(&r, 413, "payload_too_large");

    // Files: 5 fit, the 6th does not.
    for i in 0..limits.max_run_files {
        app.upload(
            &t.owner,
            &run,
            &format!("uploads/{i}.txt"),
            &format!("{i}"),
            &[],
        )
        .await
        .expect_status(201);
    }
    let r = app
        .upload(&t.owner, &run, "uploads/one-more.txt", "x", &[])
        .await;
    let detail = assert_problem(&r, 409, "quota_exceeded");
    assert!(detail.contains("files"), "{detail}");
    // Bytes: replacing a file counts only the difference, and past the quota is refused.
    let nearly = "y".repeat(limits.max_file_bytes as usize - 10);
    app.upload(&t.owner, &run, "uploads/0.txt", &nearly, &[])
        .await
        .expect_status(200);
    let r = app
        .upload(&t.owner, &run, "uploads/1.txt", &nearly, &[])
        .await;
    r.expect_status(200);
    let r = app
        .upload(&t.owner, &run, "uploads/2.txt", &"z".repeat(20), &[])
        .await;
    let detail = assert_problem(&r, 409, "quota_exceeded");
    assert!(detail.contains("bytes"), "{detail}");

    // If-None-Match: * only creates; If-Match replaces only the content named.
    let r = app
        .upload(
            &t.owner,
            &run,
            "uploads/3.txt",
            "new",
            &[("if-none-match", "*")],
        )
        .await;
    assert_problem(&r, 412, "precondition_failed");
    let current = app
        .get(&format!("/v1/runs/{run}/files/uploads/3.txt"), &t.owner)
        .await;
    let etag = current.headers[header::ETAG]
        .to_str()
        .expect("ascii")
        .to_string();
    let stale = format!("\"{}\"", "0".repeat(64));
    let r = app
        .upload(
            &t.owner,
            &run,
            "uploads/3.txt",
            "4",
            &[("if-match", &stale)],
        )
        .await;
    assert_problem(&r, 412, "precondition_failed");
    app.upload(&t.owner, &run, "uploads/3.txt", "4", &[("if-match", &etag)])
        .await
        .expect_status(200);
    let after = app
        .get(&format!("/v1/runs/{run}/files/uploads/3.txt"), &t.owner)
        .await;
    assert_eq!(after.text, "4");
}

#[tokio::test]
async fn markup_downloads_only_as_attachments() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let page = "<script>alert(document.cookie)</script>";
    for (name, inline) in [
        ("uploads/page.html", false),
        ("uploads/image.svg", false),
        ("uploads/feed.xml", false),
        ("uploads/mystery", false),
        ("uploads/notes.txt", true),
    ] {
        app.upload(&t.owner, &run, name, page, &[])
            .await
            .expect_status(201);
        let r = app
            .get(&format!("/v1/runs/{run}/files/{name}"), &t.owner)
            .await;
        let r = r.expect_status(200);
        let disposition = r.headers[header::CONTENT_DISPOSITION]
            .to_str()
            .expect("ascii");
        assert_eq!(
            disposition.starts_with("inline"),
            inline,
            "{name}: {disposition}"
        );
        assert!(
            r.headers["content-security-policy"]
                .to_str()
                .expect("ascii")
                .contains("sandbox")
        );
    }
}

#[tokio::test]
async fn readiness_says_when_commands_cannot_run_here() {
    // The API tests' engine has no sandbox.
    let (app, _) = TestApp::with_tenant().await;
    let ready = app.get("/readyz", &crate::support::Anonymous).await;
    assert_eq!(ready.body["status"], "ready", "{}", ready.text);
    assert_eq!(ready.body["code_tools"], "unavailable", "{}", ready.text);
}
