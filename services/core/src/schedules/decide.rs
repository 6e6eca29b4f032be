//! What a due schedule does at its fire time: start a run, or skip, and where its
//! timetable goes next. Pure: the job claims the decision by a version check, so it is
//! taken once however many replicas look at the schedule.

use super::timetable::Timetable;
use crate::model::{MissedFires, Overlap, ScheduleSpec};
use chrono::{DateTime, TimeDelta, Utc};

/// Missed fire times counted one by one; past this many the count stops and the
/// timetable jumps ahead.
pub const MAX_COUNTED_MISSES: u64 = 1000;

/// A decision for the fire time that is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// A run to start: its fire time and how many fire times it stands for (1, or more
    /// when missed ones are run once).
    pub fire: Option<(DateTime<Utc>, u64)>,
    /// Fire times passed over without a run.
    pub skipped: u64,
    /// The next fire time; `None`: the schedule ended.
    pub next: Option<DateTime<Utc>>,
}

/// What `spec`, due at `due`, does at `now`: a fire time older than `grace` counts as
/// missed (with every other one since), and a fire while `previous_active` (the last run
/// it started has not settled) follows the overlap policy.
pub fn decide(
    timetable: &Timetable,
    spec: &ScheduleSpec,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    grace: TimeDelta,
    previous_active: bool,
) -> Decision {
    let overlaps = spec.overlap == Overlap::Skip && previous_active;
    if spec.ends_at.is_some_and(|end| due > end) {
        return Decision {
            fire: None,
            skipped: 0,
            next: None,
        };
    }
    let horizon = now - grace;
    let mut decision = if due < horizon {
        // Missed times after the end are not the schedule's.
        let until = spec
            .ends_at
            .map_or(horizon, |end| horizon.min(end + TimeDelta::seconds(1)));
        let (count, last) = missed(timetable, due, until);
        let next = timetable.at_or_after(horizon);
        match spec.missed {
            MissedFires::RunOnce if !overlaps => Decision {
                fire: Some((last, count)),
                skipped: 0,
                next,
            },
            _ => Decision {
                fire: None,
                skipped: count,
                next,
            },
        }
    } else {
        let next = timetable.after(due);
        if overlaps {
            Decision {
                fire: None,
                skipped: 1,
                next,
            }
        } else {
            Decision {
                fire: Some((due, 1)),
                skipped: 0,
                next,
            }
        }
    };
    if let (Some(next), Some(end)) = (decision.next, spec.ends_at)
        && next > end
    {
        decision.next = None;
    }
    decision
}

/// The fire times from `due` (missed) to before `horizon`: how many (counted up to
/// [`MAX_COUNTED_MISSES`]) and the last.
fn missed(
    timetable: &Timetable,
    due: DateTime<Utc>,
    horizon: DateTime<Utc>,
) -> (u64, DateTime<Utc>) {
    let (mut count, mut last) = (1, due);
    while count < MAX_COUNTED_MISSES {
        match timetable.after(last) {
            Some(next) if next < horizon => {
                count += 1;
                last = next;
            }
            _ => return (count, last),
        }
    }
    (count, timetable.before(horizon).unwrap_or(last).max(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_events::AgentId;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("an RFC 3339 instant")
            .with_timezone(&Utc)
    }

    fn spec(cron: &str, missed: MissedFires, overlap: Overlap) -> (Timetable, ScheduleSpec) {
        let spec = ScheduleSpec {
            name: "nightly".into(),
            agent_id: AgentId::new(),
            message: "go".into(),
            title: None,
            metadata: Default::default(),
            cron: cron.into(),
            timezone: "UTC".into(),
            starts_at: None,
            ends_at: None,
            missed,
            overlap,
        };
        (Timetable::parse(cron, "UTC").expect("valid"), spec)
    }

    const GRACE: TimeDelta = TimeDelta::seconds(60);

    #[test]
    fn a_fire_within_the_grace_starts_a_run_and_moves_to_the_next_time() {
        let (t, s) = spec("0 * * * *", MissedFires::Skip, Overlap::Allow);
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:00:59Z"),
            GRACE,
            true,
        );
        assert_eq!(
            d,
            Decision {
                fire: Some((at("2026-12-02T10:00:00Z"), 1)),
                skipped: 0,
                next: Some(at("2026-12-02T11:00:00Z")),
            }
        );
    }

    #[test]
    fn with_overlap_skip_a_fire_while_the_last_run_is_active_is_skipped() {
        let (t, s) = spec("0 * * * *", MissedFires::Skip, Overlap::Skip);
        let due = at("2026-12-02T10:00:00Z");
        let d = decide(&t, &s, due, at("2026-12-02T10:00:01Z"), GRACE, true);
        assert_eq!((d.fire, d.skipped), (None, 1));
        assert_eq!(d.next, Some(at("2026-12-02T11:00:00Z")));
        let d = decide(&t, &s, due, at("2026-12-02T10:00:01Z"), GRACE, false);
        assert_eq!(d.fire, Some((due, 1)));
    }

    #[test]
    fn missed_fires_are_skipped_and_the_timetable_resumes_within_the_grace() {
        let (t, s) = spec("*/10 * * * *", MissedFires::Skip, Overlap::Allow);
        // Down from 10:00 to 10:35:30: 10:00, 10:10, 10:20, 10:30 passed; 10:35:30 minus
        // the grace is 10:34:30, so 10:40 comes next.
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:35:30Z"),
            GRACE,
            false,
        );
        assert_eq!(
            d,
            Decision {
                fire: None,
                skipped: 4,
                next: Some(at("2026-12-02T10:40:00Z")),
            }
        );
        // Back just after 10:40:30: 10:40 is within the grace, and is fired next.
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:40:30Z"),
            GRACE,
            false,
        );
        assert_eq!((d.skipped, d.next), (4, Some(at("2026-12-02T10:40:00Z"))));
    }

    #[test]
    fn missed_fires_run_once_at_the_latest_of_them() {
        let (t, s) = spec("*/10 * * * *", MissedFires::RunOnce, Overlap::Allow);
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:35:30Z"),
            GRACE,
            false,
        );
        assert_eq!(
            d,
            Decision {
                fire: Some((at("2026-12-02T10:30:00Z"), 4)),
                skipped: 0,
                next: Some(at("2026-12-02T10:40:00Z")),
            }
        );
        // ...unless the last run is still active and overlaps are skipped.
        let (t, mut s) = spec("*/10 * * * *", MissedFires::RunOnce, Overlap::Skip);
        s.overlap = Overlap::Skip;
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:35:30Z"),
            GRACE,
            true,
        );
        assert_eq!((d.fire, d.skipped), (None, 4));
    }

    #[test]
    fn a_long_outage_is_counted_up_to_a_bound_and_jumps_to_the_present() {
        let (t, s) = spec("* * * * * *", MissedFires::RunOnce, Overlap::Allow);
        let d = decide(
            &t,
            &s,
            at("2026-12-01T00:00:00Z"),
            at("2026-12-02T00:00:00Z"),
            GRACE,
            false,
        );
        assert_eq!(
            d.fire,
            Some((at("2026-12-01T23:58:59Z"), MAX_COUNTED_MISSES))
        );
        assert_eq!(d.next, Some(at("2026-12-01T23:59:00Z")));
    }

    #[test]
    fn missed_times_after_the_end_are_neither_run_nor_counted() {
        let (t, mut s) = spec("*/10 * * * *", MissedFires::RunOnce, Overlap::Allow);
        s.ends_at = Some(at("2026-12-02T10:15:00Z"));
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:35:30Z"),
            GRACE,
            false,
        );
        assert_eq!(d.fire, Some((at("2026-12-02T10:10:00Z"), 2)));
        assert_eq!(d.next, None);
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:20:00Z"),
            at("2026-12-02T10:35:30Z"),
            GRACE,
            false,
        );
        assert_eq!(
            d,
            Decision {
                fire: None,
                skipped: 0,
                next: None
            }
        );
    }

    #[test]
    fn the_schedule_ends_after_its_last_fire_before_ends_at() {
        let (t, mut s) = spec("0 * * * *", MissedFires::Skip, Overlap::Allow);
        s.ends_at = Some(at("2026-12-02T10:30:00Z"));
        let d = decide(
            &t,
            &s,
            at("2026-12-02T10:00:00Z"),
            at("2026-12-02T10:00:00Z"),
            GRACE,
            false,
        );
        assert_eq!(d.fire, Some((at("2026-12-02T10:00:00Z"), 1)));
        assert_eq!(d.next, None);
    }
}
