//! A schedule's timetable: its cron expression read in its time zone, as instants.
//!
//! Expressions are read by `croner` (five fields, or six with seconds first; Vixie cron
//! and its usual extensions). Across a daylight-saving change a fixed time of day (one
//! value each for the hour, minute and second) the clocks skip fires once, at the first
//! instant after the change, and one they repeat fires once, at its first occurrence; any
//! other expression (several hours or minutes, or a step) fires at each instant that
//! matches, so an hourly schedule fires twice in the repeated hour and never in the
//! skipped one, and `0,30 2 * * *` fires four times in the repeated night and not at all
//! in the skipped one.

use crate::error::CoreError;
use chrono::{DateTime, FixedOffset, Offset, SubsecRound, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::{Cron, JobType};
use std::time::Duration;

/// Longest cron expression, in characters.
pub const MAX_CRON_CHARS: usize = 200;
/// How many fire times a new expression is checked over for the least interval.
const CHECKED_FIRES: usize = 8;

/// A parsed expression in its zone.
#[derive(Debug, Clone)]
pub struct Timetable {
    cron: Cron,
    tz: Tz,
}

impl Timetable {
    /// Reads `cron` in the IANA zone `timezone`.
    pub fn parse(cron: &str, timezone: &str) -> Result<Timetable, CoreError> {
        if cron.chars().count() > MAX_CRON_CHARS {
            return Err(CoreError::invalid(format!(
                "cron must be at most {MAX_CRON_CHARS} characters"
            )));
        }
        let tz: Tz = timezone.parse().map_err(|_| {
            CoreError::invalid(format!(
                "timezone {timezone:?} is not an IANA time zone (such as \"Europe/Berlin\" or \"UTC\")"
            ))
        })?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(cron)
            .map_err(|e| CoreError::invalid(format!("cron {cron:?} is not valid: {e}")))?;
        Ok(Timetable { cron, tz })
    }

    /// Checks that the expression fires at all from `now`, and never twice within
    /// `least` over its next fire times.
    pub fn check(&self, now: DateTime<Utc>, least: Duration) -> Result<(), CoreError> {
        let mut at = self.after(now).ok_or_else(|| {
            CoreError::invalid("cron never fires: no date matches it in the coming years")
        })?;
        for _ in 1..CHECKED_FIRES {
            let Some(next) = self.after(at) else { break };
            if (next - at).to_std().unwrap_or_default() < least {
                return Err(CoreError::invalid(format!(
                    "cron fires {} and {}, closer than this installation allows ({} ms)",
                    at.to_rfc3339(),
                    next.to_rfc3339(),
                    least.as_millis()
                )));
            }
            at = next;
        }
        Ok(())
    }

    /// The first fire time strictly after `t`.
    ///
    /// `croner` searches by local time, which across the hour the clocks repeat may
    /// answer an instant before `t` (the first pass of a local time, when `t` is in the
    /// second) or pass over the second pass of an expression stepping through the hours.
    /// So the expression is also read at the fixed offsets in force at `t` and at
    /// `croner`'s answer, keeping only instants that really have that offset (and, for a
    /// fixed time of day, that are the first occurrence of their local time); the
    /// earliest instant after `t` wins.
    pub fn after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let whole = t.trunc_subsecs(0);
        let found = self
            .cron
            .find_next_occurrence(&whole.with_timezone(&self.tz), false)
            .ok()
            .map(|d| d.with_timezone(&Utc));
        let mut offsets = vec![self.offset(whole)];
        if let Some(f) = found {
            offsets.push(self.offset(f));
        }
        offsets
            .into_iter()
            .filter_map(|o| self.after_at_offset(whole, o))
            .chain(found.filter(|f| *f > whole))
            .min()
    }

    /// The first fire time after `t` read at the fixed offset `o` that is a real one:
    /// the zone has offset `o` then (and, for a fixed time of day, it is the first
    /// occurrence of its local time). A few steps, for the hours around a change.
    fn after_at_offset(&self, t: DateTime<Utc>, o: FixedOffset) -> Option<DateTime<Utc>> {
        let fixed_time = self.cron.determine_job_type() == JobType::FixedTime;
        let mut from = t;
        for _ in 0..4 {
            let c = self
                .cron
                .find_next_occurrence(&from.with_timezone(&o), false)
                .ok()?
                .with_timezone(&Utc);
            let local = c.with_timezone(&self.tz);
            let real = local.offset().fix() == o
                && (!fixed_time
                    || self.tz.from_local_datetime(&local.naive_local()).earliest() == Some(local));
            if real {
                return Some(c);
            }
            from = c;
        }
        None
    }

    fn offset(&self, t: DateTime<Utc>) -> FixedOffset {
        t.with_timezone(&self.tz).offset().fix()
    }

    /// The first fire time at or after `t`.
    pub fn at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let whole = t.trunc_subsecs(0);
        if whole < t {
            self.after(whole)
        } else {
            self.after(whole - TimeDelta::seconds(1))
        }
    }

    /// The last fire time strictly before `t`.
    pub fn before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let whole = t.trunc_subsecs(0);
        let inclusive = whole < t;
        self.cron
            .find_previous_occurrence(&whole.with_timezone(&self.tz), inclusive)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// `t` in the timetable's zone, as RFC 3339.
    pub fn local(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.tz)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("an RFC 3339 instant")
            .with_timezone(&Utc)
    }

    fn fires(t: &Timetable, from: &str, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = at(from);
        for _ in 0..n {
            cursor = t.after(cursor).expect("fires");
            out.push(cursor.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        out
    }

    #[test]
    fn a_daily_time_the_clocks_skip_fires_once_just_after_the_change() {
        // Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 never happens.
        let t = Timetable::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(
            fires(&t, "2026-03-27T12:00:00Z", 4),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST, the first instant after the gap
                "2026-03-30T00:30:00Z", // 02:30 CEST
                "2026-03-31T00:30:00Z",
            ]
        );
    }

    #[test]
    fn a_daily_time_the_clocks_repeat_fires_once_at_its_first_occurrence() {
        // Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let t = Timetable::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(
            fires(&t, "2026-10-23T12:00:00Z", 3),
            [
                "2026-10-24T00:30:00Z", // 02:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 CEST, the first of the two
                "2026-10-26T01:30:00Z", // 02:30 CET
            ]
        );
    }

    #[test]
    fn an_hourly_schedule_follows_the_instants_through_both_changes() {
        let t = Timetable::parse("0 * * * *", "Europe/Berlin").expect("valid");
        // Spring: 01:00 CET, then 03:00 CEST an hour later (no 02:00 that night).
        assert_eq!(
            fires(&t, "2026-03-29T00:00:00Z", 2),
            ["2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"]
        );
        // Autumn: 02:00 CEST and 02:00 CET both fire, an hour apart.
        assert_eq!(
            fires(&t, "2026-10-24T23:30:00Z", 3),
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T02:00:00Z",
            ]
        );
        // Every half hour, from inside the first pass: 02:30 CEST, 02:00 CET, 02:30 CET.
        let t = Timetable::parse("*/30 * * * *", "Europe/Berlin").expect("valid");
        assert_eq!(
            fires(&t, "2026-10-25T00:15:00Z", 4),
            [
                "2026-10-25T00:30:00Z",
                "2026-10-25T01:00:00Z",
                "2026-10-25T01:30:00Z",
                "2026-10-25T02:00:00Z",
            ]
        );
    }

    #[test]
    fn from_inside_the_repeated_hour_a_fixed_time_already_passed_waits_for_the_next_day() {
        // 01:30Z is 02:30 CET, the second pass; 02:45 happened once already, at 00:45Z.
        let t = Timetable::parse("45 2 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(
            fires(&t, "2026-10-25T01:30:00Z", 2),
            ["2026-10-26T01:45:00Z", "2026-10-27T01:45:00Z"]
        );
    }

    #[test]
    fn six_fields_read_seconds_and_sub_second_instants_are_handled() {
        let t = Timetable::parse("*/5 * * * * *", "UTC").expect("valid");
        let from = at("2026-12-02T10:00:03.250Z");
        assert_eq!(t.after(from), Some(at("2026-12-02T10:00:05Z")));
        assert_eq!(t.at_or_after(from), Some(at("2026-12-02T10:00:05Z")));
        assert_eq!(
            t.at_or_after(at("2026-12-02T10:00:05Z")),
            Some(at("2026-12-02T10:00:05Z"))
        );
        assert_eq!(
            t.after(at("2026-12-02T10:00:05Z")),
            Some(at("2026-12-02T10:00:10Z"))
        );
        assert_eq!(t.before(from), Some(at("2026-12-02T10:00:00Z")));
        assert_eq!(
            t.before(at("2026-12-02T10:00:05Z")),
            Some(at("2026-12-02T10:00:00Z"))
        );
    }

    #[test]
    fn bad_expressions_zones_and_too_frequent_fires_are_refused_with_the_reason() {
        let e = Timetable::parse("61 * * * *", "UTC").expect_err("refused");
        assert!(
            e.to_string().contains("cron \"61 * * * *\" is not valid"),
            "{e}"
        );
        let e = Timetable::parse("0 9 * * *", "Mars/Olympus").expect_err("refused");
        assert!(e.to_string().contains("not an IANA time zone"), "{e}");
        let e = Timetable::parse(&"*".repeat(201), "UTC").expect_err("refused");
        assert!(e.to_string().contains("at most 200 characters"), "{e}");

        let now = at("2026-12-02T10:00:00Z");
        let every_second = Timetable::parse("* * * * * *", "UTC").expect("valid");
        let e = every_second
            .check(now, Duration::from_secs(5))
            .expect_err("too frequent");
        assert!(
            e.to_string()
                .contains("closer than this installation allows"),
            "{e}"
        );
        assert!(every_second.check(now, Duration::from_secs(1)).is_ok());
        let never = Timetable::parse("0 0 30 2 *", "UTC").expect("parses");
        let e = never.check(now, Duration::from_secs(1)).expect_err("never");
        assert!(e.to_string().contains("never fires"), "{e}");
    }
}
