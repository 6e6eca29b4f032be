//! Idempotency of commands carrying a client `request_id`: the fingerprint of a command's
//! input, the record stored with its result, and replaying that result for a repeat.

use crate::error::CoreError;
use crate::ports::IdempotencyRecord;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub(super) fn check_replay<T: for<'de> Deserialize<'de>>(
    rec: &IdempotencyRecord,
    fingerprint: &str,
) -> Result<T, CoreError> {
    if rec.fingerprint != fingerprint {
        return Err(CoreError::IdempotencyKeyReused(rec.request_id.clone()));
    }
    decode_replay(rec)
}

fn decode_replay<T: for<'de> Deserialize<'de>>(rec: &IdempotencyRecord) -> Result<T, CoreError> {
    serde_json::from_value(rec.response.clone()).map_err(|e| {
        CoreError::Internal(format!(
            "stored response of {} unreadable: {e}",
            rec.command
        ))
    })
}

pub(super) fn record<T: Serialize>(
    request_id: &Option<String>,
    command: &str,
    fingerprint: String,
    result: &T,
) -> Option<IdempotencyRecord> {
    request_id.as_ref().map(|id| IdempotencyRecord {
        request_id: id.clone(),
        command: command.to_string(),
        fingerprint,
        response: serde_json::to_value(result).unwrap_or(serde_json::Value::Null),
    })
}

pub(super) fn fingerprint<T: Serialize>(command: &str, input: &T) -> String {
    let body = serde_json::to_string(input).unwrap_or_default();
    hex::encode(Sha256::digest(format!("{command}\n{body}").as_bytes()))
}
