//! `rolling-upgrade`: replaces each replica in turn under load, as a rolling deployment
//! does: the replica leaves the load's rotation, gets SIGTERM (it drains: its runs are
//! brought to a step boundary and handed off), and once it has exited a new process
//! takes its name and rejoins the rotation. Per replica it times signal -> exit and, per
//! run it held, signal -> the new owner's `lease.acquired` (the hand-off time). A run not
//! taken over, or a replica not exiting, within the deadline is a failure.

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
pub struct UpgradeArgs {
    #[command(flatten)]
    pub fault: FaultArgs,
    /// Seconds between one replica rejoining and the next one's SIGTERM.
    #[arg(long, default_value_t = 5.0)]
    pub pause_secs: f64,
    /// Seconds between taking a replica out of the rotation and its SIGTERM, as the
    /// chart's preStop sleep gives load balancers: requests already sent to it are read
    /// before it stops reading new ones. 0 signals at once.
    #[arg(long, default_value_t = 1.0)]
    pub leave_secs: f64,
}

/// One replica's replacement.
#[derive(Debug, Clone, Serialize)]
struct Step {
    replica: usize,
    /// Active runs it held at the signal.
    held: usize,
    taken_over: usize,
    reasons: BTreeMap<String, usize>,
    /// SIGTERM -> exit, in ms.
    exit_ms: Option<f64>,
    exit_status: Option<String>,
    /// Exit -> the new process listening, in ms.
    restart_ms: f64,
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: UpgradeArgs) -> anyhow::Result<usize> {
    if args.fault.smoke {
        args.fault.smoke();
        args.fault.duration_secs = 12.0;
        args.pause_secs = 1.0;
        args.leave_secs = 0.3;
    }
    let pause = Duration::from_secs_f64(args.pause_secs);
    let leave = Duration::from_secs_f64(args.leave_secs);
    let deadline = args.fault.deadline();
    let replicas = args.fault.replicas;
    faults::run("rolling-upgrade", &args.fault, async move |env: &mut Env<'_>| {
        let mut steps = Vec::new();
        let mut all: Vec<Taken> = Vec::new();
        let mut failures = Vec::new();
        for i in 0..replicas {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            let (step, taken) = replace(env, i, leave, deadline).await?;
            if step.taken_over < step.held {
                failures.push(format!(
                    "replica-{i}: {} of {} runs not taken over within {deadline:?}",
                    step.held - step.taken_over,
                    step.held
                ));
            }
            if step.exit_ms.is_none() {
                failures.push(format!("replica-{i} did not exit within {deadline:?} of SIGTERM"));
            }
            steps.push(step);
            all.extend(taken);
        }
        let (handoff, by_reason) = faults::takeover_summary(&all);
        let mut md = format!(
            "## Hand-off\n\nEach replica in turn: out of rotation, {:.1} s later SIGTERM, exit, a new \
             process, back in rotation. Hand-off = SIGTERM -> the new owner's \
             `lease.acquired`, per run the replica held.\n\n{MD_HEADER}\n{}\n",
            leave.as_secs_f64(),
            handoff.md_row("hand-off, all reasons")
        );
        for (reason, s) in &by_reason {
            md.push_str(&s.md_row(&format!("hand-off, reason `{reason}`")));
            md.push('\n');
        }
        md.push_str("\n| replica | runs held | taken over | SIGTERM -> exit ms | exit | restart ms |\n|---|---:|---:|---:|---|---:|\n");
        for s in &steps {
            md.push_str(&format!(
                "| replica-{} | {} | {} | {} | {} | {:.0} |\n",
                s.replica,
                s.held,
                s.taken_over,
                s.exit_ms.map_or("-".into(), |m| format!("{m:.0}")),
                s.exit_status.as_deref().unwrap_or("-"),
                s.restart_ms
            ));
        }
        Ok(Faulted {
            json: json!({
                "kind": "rolling-upgrade",
                "pause_secs": pause.as_secs_f64(),
                "leave_secs": leave.as_secs_f64(),
                "handoff": handoff,
                "handoff_by_reason": by_reason,
                "steps": steps,
            }),
            md,
            failures,
        })
    })
    .await
}

/// Replaces replica `i`, `leave` after taking it out of the rotation; returns the step
/// and the take-overs of its runs.
async fn replace(
    env: &mut Env<'_>,
    i: usize,
    leave: Duration,
    deadline: Duration,
) -> anyhow::Result<(Step, Vec<Taken>)> {
    env.rotation.remove(i);
    tokio::time::sleep(leave).await;
    // The runs it holds as it is signalled (it keeps driving until then).
    let (identity, held) = takeover::held_by(env.cluster, env.runs, i).await?;
    let victim = identity.unwrap_or_default();
    let wall = Utc::now();
    let at = Instant::now();
    env.cluster.sigterm(i)?;
    env.mark(format!("SIGTERM replica-{i} ({} active runs)", held.len()));
    let mut taken: HashMap<uuid::Uuid, Taken> = HashMap::new();
    let mut exit = None;
    let mut said = Instant::now();
    while (taken.len() < held.len() || exit.is_none()) && at.elapsed() < deadline {
        if exit.is_none() && !env.cluster.is_running(i)? {
            exit = Some(at.elapsed().as_secs_f64() * 1e3);
            let status = env.cluster.wait_exit(i, Duration::from_secs(1)).await?;
            env.mark(format!("replica-{i} exited ({status})"));
        }
        takeover::poll(env.cluster, &victim, &held, wall, &mut taken).await?;
        if said.elapsed() >= Duration::from_secs(1) {
            said = Instant::now();
            env.p.say(format!(
                "replica-{i}: {}/{} runs handed off, exited: {}",
                taken.len(),
                held.len(),
                exit.is_some()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    let exit_status = match exit {
        Some(_) => Some(
            env.cluster
                .wait_exit(i, Duration::from_secs(1))
                .await?
                .to_string(),
        ),
        None => None,
    };
    let restarting = Instant::now();
    // Kills the old process first if it still runs.
    env.cluster
        .restart(i)
        .await
        .with_context(|| format!("restarting replica-{i}"))?;
    let restart_ms = restarting.elapsed().as_secs_f64() * 1e3;
    env.rejoin(i);
    env.mark(format!("replica-{i} started again"));
    let mut reasons = BTreeMap::new();
    for t in taken.values() {
        *reasons.entry(t.reason.clone()).or_default() += 1;
    }
    let step = Step {
        replica: i,
        held: held.len(),
        taken_over: taken.len(),
        reasons,
        exit_ms: exit,
        exit_status,
        restart_ms,
    };
    Ok((step, taken.into_values().collect()))
}
