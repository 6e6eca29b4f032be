//! The API paths of `append`: `create` posts `POST /v1/runs` without a message (one
//! `run.created` per request); `post_message` posts messages to idle runs of each
//! client's own. Where the harness spawned the cluster, the events stored per second
//! are counted from its database as well.

use super::{Phase, RUNS_PER_POSTER, Tally, closed_loop};
use crate::client::Client;
use crate::stats::Progress;
use crate::target::Target;
use anyhow::Context;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The API path of `create`: `POST /v1/runs` without a message (one `run.created`).
pub async fn api_create(
    target: &Target,
    client: &Client,
    agent: &str,
    clients: usize,
    secs: f64,
    p: Progress,
) -> anyhow::Result<(Phase, Vec<uuid::Uuid>)> {
    // The replicas' busy pooled connections publish their counters late (Postgres
    // defers it under contention), so their transactions are not counted.
    let tally = Tally::new(secs, target.pids(), None);
    let urls = target.urls.clone();
    let label = format!("append create via api, {clients} clients");
    let runs = closed_loop(&label, "appends", clients, &tally, p, |i, tally| {
        let (c, url) = (client.clone(), format!("{}/v1/runs", urls[i % urls.len()]));
        let body = json!({"agent_id": agent});
        async move {
            let mut made = Vec::new();
            while tally.running() {
                let began = Instant::now();
                let (outcome, answer) = c.load(url.clone(), Some(body.clone())).await;
                if let Some(run) = answer.and_then(|a| crate::client::run_id(&a).ok()) {
                    made.push(run);
                }
                tally.record(began, outcome);
            }
            anyhow::Ok(made)
        }
    })
    .await?;
    tally.count_db().await?;
    let mut phase = tally.phase("api", "create", clients);
    phase.events_per_sec = events_per_sec(target, &tally).await?;
    Ok((phase, runs.into_iter().flatten().collect()))
}

/// `post_message` through the API: each client rotates over runs of its own, posting to
/// the next one as soon as the last post answered; a busy run (`409`) is skipped.
pub async fn api_post(
    target: &Target,
    client: &Client,
    agent: &str,
    clients: usize,
    secs: f64,
    p: Progress,
) -> anyhow::Result<(Phase, Vec<uuid::Uuid>)> {
    let mut runs = Vec::with_capacity(clients * RUNS_PER_POSTER);
    for i in 0..clients * RUNS_PER_POSTER {
        runs.push(client.create_run(target.url(i as u64), agent, None).await?);
    }
    let label = format!("append message via api (post_message), {clients} clients");
    p.say(format!("{label}: measuring {secs} s"));
    let tally = Tally::new(secs, target.pids(), None);
    let urls = target.urls.clone();
    let all = Arc::new(runs.clone());
    closed_loop(&label, "appends", clients, &tally, p, |i, tally| {
        let (c, base, all) = (client.clone(), urls[i % urls.len()].clone(), all.clone());
        async move {
            let own = &all[i * RUNS_PER_POSTER..(i + 1) * RUNS_PER_POSTER];
            let mut n = 0usize;
            while tally.running() {
                let run = own[n % own.len()];
                n += 1;
                let began = Instant::now();
                let url = format!("{base}/v1/runs/{run}/messages");
                let body = json!({"content": format!("m{n}")});
                let (outcome, _) = c.load(url, Some(body)).await;
                tally.record(began, outcome);
            }
            anyhow::Ok(())
        }
    })
    .await?;
    tally.count_db().await?;
    let mut phase = tally.phase("api post_message", "message", clients);
    phase.events_per_sec = events_per_sec(target, &tally).await?;
    p.say(format!("{label}: {:.0}/s", phase.per_sec));
    // Let the last turns end before their runs are checked.
    client
        .wait_settled(&target.urls, &runs, Duration::from_secs(60))
        .await?;
    Ok((phase, runs))
}

/// Events the cluster stored in the tally's window, per second (spawned clusters only).
async fn events_per_sec(target: &Target, tally: &Tally) -> anyhow::Result<Option<f64>> {
    let Some(url) = target.database_url() else {
        return Ok(None);
    };
    let from = crate::open_loop::wall_at(tally.measure_from);
    let until = crate::open_loop::wall_at(tally.until);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .context("connecting to the cluster's database")?;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE recorded_at >= $1 AND recorded_at < $2",
    )
    .bind(from)
    .bind(until)
    .fetch_one(&pool)
    .await
    .context("counting events")?;
    pool.close().await;
    Ok(Some(
        n as f64 / (tally.until - tally.measure_from).as_secs_f64(),
    ))
}
