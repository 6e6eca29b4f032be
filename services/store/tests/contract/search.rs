//! Run search, property style: runs generated with random agents, titles, labels,
//! statuses and times (some relabelled later, some in another tenant), then random
//! filters, each answered by the store exactly as `RunFilter::matches` answers it in
//! memory, in one page and walked in small pages alike. A failure prints the seed;
//! `BATON_SEARCH_SEED=<n>` replays it.

use crate::support::*;
use baton_core::model::{RunStatus, RunSummary};
use baton_core::ports::{RunFilter, RunListQuery, fold_title};
use baton_events::{AgentId, Metadata, RunCancelled, RunCreated, RunEvent, RunId, RunUpdated};
use chrono::{DateTime, TimeDelta, Utc};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

const RUNS: usize = 60;
const QUERIES: usize = 150;

const KEYS: &[&str] = &["team", "tier", "region", "a.b-c_d"];
const VALUES: &[&str] = &["support", "billing", "gold", "eu", "", "x:y", "Ünï"];
const TITLES: &[&str] = &[
    "Refund for order 1042",
    "refund REQUEST",
    "Straße Ünïcode",
    "shipping delay",
    "100% _literal_ match",
];

fn seed() -> u64 {
    std::env::var("BATON_SEARCH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random)
}

fn labels(rng: &mut StdRng) -> Metadata {
    let mut m = Metadata::new();
    for key in KEYS {
        if rng.random_bool(0.5) {
            let value = VALUES.choose(rng).expect("values");
            m.insert((*key).to_string(), (*value).to_string());
        }
    }
    m
}

fn title(rng: &mut StdRng) -> Option<String> {
    rng.random_bool(0.8)
        .then(|| TITLES.choose(rng).expect("titles").to_string())
}

/// A time `base` plus up to a minute, to the microsecond: bounds fall between runs and
/// on them, and fractions of a second of every width are compared.
fn time(rng: &mut StdRng, base: DateTime<Utc>) -> DateTime<Utc> {
    base + TimeDelta::microseconds(rng.random_range(0..60_000_000))
}

/// A piece of `text` in random case: what a person types into a search box.
fn piece(rng: &mut StdRng, text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let start = rng.random_range(0..chars.len());
    let len = rng.random_range(1..=(chars.len() - start).min(8));
    chars[start..start + len]
        .iter()
        .map(|c| {
            if rng.random_bool(0.5) {
                c.to_uppercase().collect::<String>()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn random_filter(rng: &mut StdRng, runs: &[RunSummary], agents: &[AgentId]) -> RunFilter {
    let mut f = RunFilter::default();
    if rng.random_bool(0.3) {
        f.agent = agents.choose(rng).copied();
    }
    if rng.random_bool(0.3) {
        f.status = [RunStatus::Waiting, RunStatus::Queued, RunStatus::Cancelled]
            .choose(rng)
            .copied();
    }
    for _ in 0..rng.random_range(0..=2) {
        let key = KEYS.choose(rng).expect("keys");
        let value = VALUES.choose(rng).expect("values");
        f.metadata.push(((*key).to_string(), (*value).to_string()));
    }
    if rng.random_bool(0.3)
        && let Some(t) = runs.choose(rng).and_then(|r| r.title.as_deref())
    {
        let q = piece(rng, t);
        if !q.trim().is_empty() {
            f.title_contains = Some(fold_title(&q));
        }
    }
    let pick = |rng: &mut StdRng, f: fn(&RunSummary) -> DateTime<Utc>| {
        let r = runs.choose(rng).expect("runs");
        // On a run's own time, or a microsecond either side of it.
        f(r) + TimeDelta::microseconds(rng.random_range(-1..=1))
    };
    if rng.random_bool(0.25) {
        f.created_after = Some(pick(rng, |r| r.created_at));
    }
    if rng.random_bool(0.25) {
        f.created_before = Some(pick(rng, |r| r.created_at));
    }
    if rng.random_bool(0.25) {
        f.updated_after = Some(pick(rng, |r| r.updated_at));
    }
    if rng.random_bool(0.25) {
        f.updated_before = Some(pick(rng, |r| r.updated_at));
    }
    f
}

async fn list<S: Store>(
    s: &S,
    tenant: baton_events::TenantId,
    filter: &RunFilter,
    before: Option<RunId>,
    limit: u32,
) -> Vec<RunId> {
    let q = RunListQuery {
        filter: filter.clone(),
        before,
        limit,
    };
    let runs = s.list_runs(tenant, &q).await.expect("list");
    runs.iter().map(|r| r.id).collect()
}

pub async fn list_runs_answers_exactly_the_runs_each_filter_matches<S: Store>(s: &S) {
    let seed = seed();
    eprintln!("run search: BATON_SEARCH_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (t, other) = (tenant(s).await, tenant(s).await);
    let agents: Vec<AgentId> = (0..3).map(|_| AgentId::new()).collect();
    let base = now();
    let mut expected: Vec<(RunId, Option<String>, Metadata)> = Vec::new();
    for i in 0..RUNS + 5 {
        let owner = if i < RUNS { t } else { other };
        let run = RunId::new();
        let (mut title, mut metadata) = (title(&mut rng), labels(&mut rng));
        let created = event(
            owner,
            RunEvent::RunCreated(RunCreated {
                agent_id: *agents.choose(&mut rng).expect("agents"),
                agent_version: 1,
                title: title.clone(),
                metadata: metadata.clone(),
                tool_versions: Default::default(),
                parent: None,
            }),
        );
        let mut req = request(run, 0, vec![created]);
        req.at = time(&mut rng, base);
        let (mut summary, _) = append_ok(s, owner, req).await;
        let later = |rng: &mut StdRng, after: DateTime<Utc>| {
            after + TimeDelta::microseconds(rng.random_range(1..5_000_000))
        };
        match rng.random_range(0..3) {
            0 => {}
            1 => {
                let mut req = request(run, summary.version, vec![turn_requested(owner, 1)]);
                req.at = later(&mut rng, summary.updated_at);
                summary = append_ok(s, owner, req).await.0;
            }
            _ => {
                let cancelled = RunEvent::RunCancelled(RunCancelled { reason: None });
                let mut req = request(run, summary.version, vec![event(owner, cancelled)]);
                req.at = later(&mut rng, summary.updated_at);
                summary = append_ok(s, owner, req).await.0;
            }
        }
        // Relabelled afterwards, ended or not.
        if rng.random_bool(0.4) {
            (title, metadata) = (self::title(&mut rng), labels(&mut rng));
            let updated = RunEvent::RunUpdated(RunUpdated {
                title: title.clone(),
                metadata: metadata.clone(),
            });
            let mut req = request(run, summary.version, vec![event(owner, updated)]);
            req.at = later(&mut rng, summary.updated_at);
            append_ok(s, owner, req).await;
        }
        if owner == t {
            expected.push((run, title, metadata));
        }
    }

    let everything = RunFilter::default();
    let all = s
        .list_runs(
            t,
            &RunListQuery {
                filter: everything,
                before: None,
                limit: 500,
            },
        )
        .await
        .expect("list");
    assert_eq!(all.len(), RUNS, "seed {seed}: only the tenant's runs");
    for (run, title, metadata) in &expected {
        let stored = all.iter().find(|r| r.id == *run).expect("listed");
        assert_eq!(
            (&stored.title, &stored.metadata),
            (title, metadata),
            "seed {seed}"
        );
        let got = s.get_run(t, *run).await.expect("get").expect("found");
        assert_eq!(&got, stored, "seed {seed}: a listed run reads back alike");
    }

    let mut matched_some = 0;
    for _ in 0..QUERIES {
        let filter = random_filter(&mut rng, &all, &agents);
        let want: Vec<RunId> = all
            .iter()
            .filter(|r| filter.matches(r))
            .map(|r| r.id)
            .collect();
        let got = list(s, t, &filter, None, 500).await;
        assert_eq!(got, want, "seed {seed}: {filter:?}");
        matched_some += usize::from(!want.is_empty());
        // Small pages, each after the last id of the one before, add up to the same.
        let mut paged: Vec<RunId> = Vec::new();
        let mut before = None;
        loop {
            let page = list(s, t, &filter, before, 4).await;
            paged.extend(&page);
            if page.len() < 4 {
                break;
            }
            before = page.last().copied();
        }
        assert_eq!(paged, want, "seed {seed}: paged {filter:?}");
    }
    assert!(
        matched_some > QUERIES / 4,
        "seed {seed}: the filters must find runs, not only nothing ({matched_some})"
    );
}
