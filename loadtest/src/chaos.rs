//! `chaos`: K cycles, each picking a replica and a fault at random (seeded; the seed is
//! printed and `--seed` replays the same choices): SIGKILL (a crash; the replica is
//! restarted once its runs are adopted) or SIGSTOP (a pause: the replica is resumed with
//! SIGCONT once its leases have lapsed and its runs are adopted, and must find itself
//! fenced). The replica leaves the load's rotation first and rejoins after. Per cycle it
//! times, per run the replica held, signal -> the adopter's `lease.acquired`. A stopped
//! replica is always resumed before the cycle ends, whatever happens meanwhile; the
//! cluster kills every process on any early exit.

use crate::faults::{self, Env, FaultArgs, Faulted, POLL};
use crate::stats::MD_HEADER;
use crate::takeover::{self, Taken};
use anyhow::Context;
use chrono::Utc;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct ChaosArgs {
    #[command(flatten)]
    pub fault: FaultArgs,
    /// Fault cycles.
    #[arg(long, default_value_t = 6)]
    pub cycles: usize,
    /// Faults to choose from: `kill` (SIGKILL, then restart), `stop` (SIGSTOP, then SIGCONT).
    #[arg(long, value_delimiter = ',', default_value = "kill,stop")]
    pub kinds: Vec<Kind>,
    /// Seconds between one cycle's end and the next fault.
    #[arg(long, default_value_t = 4.0)]
    pub interval_secs: f64,
    /// Seed of the random choices (default: from the clock; printed either way).
    #[arg(long)]
    pub seed: Option<u64>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Kill,
    Stop,
}

/// SplitMix64: a small, fully determined generator, so a seed replays a run exactly.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// One cycle.
#[derive(Debug, Clone, Serialize)]
struct Cycle {
    cycle: usize,
    replica: usize,
    kind: Kind,
    /// Active runs it held at the signal.
    held: usize,
    adopted: usize,
    reasons: BTreeMap<String, usize>,
    /// Signal -> SIGCONT or restart done, in ms.
    down_ms: f64,
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: ChaosArgs) -> anyhow::Result<usize> {
    if args.fault.smoke {
        args.fault.smoke();
        args.fault.duration_secs = 10.0;
        args.interval_secs = 1.0;
        args.cycles = args.cycles.min(2);
    }
    anyhow::ensure!(!args.kinds.is_empty(), "--kinds needs at least one fault");
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    eprintln!("chaos seed {seed} (replay with --seed {seed})");
    let deadline = args.fault.deadline();
    // A paused replica stays paused at least until its leases have lapsed and an
    // adoption round has run.
    let pause_at_least = Duration::from_millis(args.fault.lease_ttl_ms + 1000);
    let replicas = args.fault.replicas;
    let interval = Duration::from_secs_f64(args.interval_secs);
    let (cycles, kinds) = (args.cycles, args.kinds.clone());
    faults::run("chaos", &args.fault, async move |env: &mut Env<'_>| {
        let mut rng = Rng::new(seed);
        let mut done = Vec::new();
        let mut all: Vec<(Kind, Taken)> = Vec::new();
        let mut failures = Vec::new();
        for c in 0..cycles {
            if c > 0 {
                tokio::time::sleep(interval).await;
            }
            let i = rng.below(replicas);
            let kind = kinds[rng.below(kinds.len())];
            let (cycle, taken) = inject(env, c, i, kind, deadline, pause_at_least).await?;
            if cycle.adopted < cycle.held {
                failures.push(format!(
                    "cycle {c} ({kind:?} replica-{i}): {} of {} runs not adopted within {deadline:?}",
                    cycle.held - cycle.adopted,
                    cycle.held
                ));
            }
            done.push(cycle);
            all.extend(taken.into_iter().map(|t| (kind, t)));
        }
        let every: Vec<Taken> = all.iter().map(|(_, t)| t.clone()).collect();
        let (adoption, by_reason) = faults::takeover_summary(&every);
        let mut by_kind = BTreeMap::new();
        for k in [Kind::Kill, Kind::Stop] {
            let of: Vec<Taken> = all.iter().filter(|(x, _)| *x == k).map(|(_, t)| t.clone()).collect();
            if !of.is_empty() {
                by_kind.insert(format!("{k:?}").to_lowercase(), faults::takeover_summary(&of).0);
            }
        }
        let mut md = format!(
            "## Adoption\n\nSeed {seed} (`--seed {seed}` replays the choices). Each cycle: a \
             random replica out of rotation, SIGKILL (then restarted) or SIGSTOP (then \
             SIGCONT), back in rotation. Adoption = signal -> the adopter's \
             `lease.acquired`, per run the replica held.\n\n{MD_HEADER}\n{}\n",
            adoption.md_row("adoption, all faults")
        );
        for (k, s) in &by_kind {
            md.push_str(&s.md_row(&format!("adoption after {k}")));
            md.push('\n');
        }
        md.push_str("\n| cycle | replica | fault | runs held | adopted | down ms |\n|---:|---|---|---:|---:|---:|\n");
        for x in &done {
            md.push_str(&format!(
                "| {} | replica-{} | {:?} | {} | {} | {:.0} |\n",
                x.cycle, x.replica, x.kind, x.held, x.adopted, x.down_ms
            ));
        }
        Ok(Faulted {
            json: json!({
                "kind": "chaos",
                "seed": seed,
                "cycles": done,
                "adoption": adoption,
                "adoption_by_reason": by_reason,
                "adoption_by_fault": by_kind,
            }),
            md,
            failures,
        })
    })
    .await
}

/// One cycle on replica `i`; returns it and the adoptions of the replica's runs.
async fn inject(
    env: &mut Env<'_>,
    c: usize,
    i: usize,
    kind: Kind,
    deadline: Duration,
    pause_at_least: Duration,
) -> anyhow::Result<(Cycle, Vec<Taken>)> {
    let (identity, held) = takeover::held_by(env.cluster, env.runs, i).await?;
    let victim = identity.unwrap_or_default();
    env.rotation.remove(i);
    let wall = Utc::now();
    let at = Instant::now();
    match kind {
        Kind::Kill => env.cluster.sigkill(i)?,
        Kind::Stop => env.cluster.sigstop(i)?,
    }
    let sig = if kind == Kind::Kill {
        "SIGKILL"
    } else {
        "SIGSTOP"
    };
    env.mark(format!(
        "cycle {c}: {sig} replica-{i} ({} active runs)",
        held.len()
    ));
    let mut taken: HashMap<uuid::Uuid, Taken> = HashMap::new();
    // Whatever the wait ends with, a stopped replica is resumed before anything else.
    let waited = adoptions(
        env,
        &victim,
        &held,
        wall,
        at,
        deadline,
        kind,
        pause_at_least,
        &mut taken,
    )
    .await;
    match kind {
        Kind::Stop => {
            let resumed = env.cluster.sigcont(i);
            waited?;
            resumed?;
            env.mark(format!("cycle {c}: SIGCONT replica-{i}"));
        }
        Kind::Kill => {
            waited?;
            env.cluster
                .wait_exit(i, Duration::from_secs(5))
                .await
                .with_context(|| format!("replica-{i} after SIGKILL"))?;
            env.cluster
                .restart(i)
                .await
                .with_context(|| format!("restarting replica-{i}"))?;
            env.mark(format!("cycle {c}: replica-{i} restarted"));
        }
    }
    env.rejoin(i);
    let mut reasons = BTreeMap::new();
    for t in taken.values() {
        *reasons.entry(t.reason.clone()).or_default() += 1;
    }
    let cycle = Cycle {
        cycle: c,
        replica: i,
        kind,
        held: held.len(),
        adopted: taken.len(),
        reasons,
        down_ms: at.elapsed().as_secs_f64() * 1e3,
    };
    Ok((cycle, taken.into_values().collect()))
}

/// Polls until every run of `held` is adopted (and, for a pause, `pause_at_least` has
/// passed) or `deadline`.
#[allow(clippy::too_many_arguments)]
async fn adoptions(
    env: &mut Env<'_>,
    victim: &str,
    held: &HashMap<uuid::Uuid, i64>,
    wall: chrono::DateTime<Utc>,
    at: Instant,
    deadline: Duration,
    kind: Kind,
    pause_at_least: Duration,
    taken: &mut HashMap<uuid::Uuid, Taken>,
) -> anyhow::Result<()> {
    let min = if kind == Kind::Stop {
        pause_at_least
    } else {
        Duration::ZERO
    };
    let mut said = Instant::now();
    while (taken.len() < held.len() || at.elapsed() < min) && at.elapsed() < deadline {
        takeover::poll(env.cluster, victim, held, wall, taken).await?;
        if said.elapsed() >= Duration::from_secs(1) {
            said = Instant::now();
            env.p
                .say(format!("{}/{} runs adopted", taken.len(), held.len()));
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_choices() {
        let picks = |seed| {
            let mut r = Rng::new(seed);
            (0..20).map(|_| r.below(3)).collect::<Vec<_>>()
        };
        assert_eq!(picks(42), picks(42));
        assert_ne!(picks(42), picks(43));
        assert!(picks(7).iter().all(|i| *i < 3));
        // Every replica gets picked over a few draws.
        let p = picks(1);
        assert!((0..3).all(|i| p.contains(&i)), "{p:?}");
    }
}
