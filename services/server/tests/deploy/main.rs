//! The deployment artefacts: the Dockerfile, read carefully (no Docker engine here), and the
//! Helm chart `helm/baton`, linted, rendered for several value sets, validated against the
//! Kubernetes schemas and checked for the properties a rolling upgrade depends on. The
//! settings the chart renders are fed to this build's `baton config explain`, so a key the
//! binary would refuse never ships.
//!
//! [`tools`] finds and runs helm, kubernetes-validate and python; [`render`] holds the value
//! sets and the parsed objects; the tests are in [`chart`] (lint, schemas, defaults),
//! [`features`] (optional objects), [`monitoring`] (alerts and dashboard), [`readme`] (the
//! values table), [`refusals`] (renders that must fail), [`dockerfile`] and [`config`]
//! (against `baton config explain`).
//!
//! Needs `helm`, `kubernetes-validate` and `promtool` from `scripts/chart-tools` (which
//! `scripts/test` runs) in `target/chart-tools/`, or in `$BATON_CHART_TOOLS`.

mod chart;
mod config;
mod dockerfile;
mod features;
mod monitoring;
mod readme;
mod reference;
mod refusals;
mod render;
mod tools;
