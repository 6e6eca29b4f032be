//! The rows of `tools` and `tool_versions`: each tool's definition kept whole in one JSON
//! column.

use super::{corrupt, to_json};
use baton_core::StoreError;
use baton_core::model::Tool;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `tools`, in the order its row type reads them.
macro_rules! tool_columns {
    () => {
        "tenant_id, id, name, definition, version, created_at, updated_at, archived_at"
    };
}
pub(crate) use tool_columns;

/// Expands to the columns of `tool_versions` as a [`ToolRow`] reads them, joined with
/// `tools` (as `t`) for the tool's archive time.
macro_rules! tool_version_columns {
    () => {
        "v.tenant_id, v.tool_id AS id, v.name, v.definition, v.version, v.created_at, \
         v.updated_at, t.archived_at"
    };
}
pub(crate) use tool_version_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ToolRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub definition: Json<serde_json::Value>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

impl TryFrom<ToolRow> for Tool {
    type Error = StoreError;

    /// The definition holds the whole tool but its tenant; the key and timestamp
    /// columns are authoritative.
    fn try_from(r: ToolRow) -> Result<Self, StoreError> {
        let tool: Tool = serde_json::from_value(r.definition.0)
            .map_err(|e| corrupt(format!("tool {} has an unreadable definition: {e}", r.id)))?;
        Ok(Tool {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            archived_at: r.archived_at,
            ..tool
        })
    }
}

/// A tool's `definition` column: the whole tool (its tenant is not serialized).
pub(crate) fn tool_json(tool: &Tool) -> Result<serde_json::Value, StoreError> {
    to_json("tool", tool)
}
