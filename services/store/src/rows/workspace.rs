//! The rows of `workspace_files` (with the content of `blobs` for a download).

use baton_core::StoreError;
use baton_core::model::{FileContent, WorkspaceFile};
use chrono::{DateTime, Utc};

/// The columns of a file, for a `SELECT` to `concat!`.
macro_rules! file_columns {
    () => {
        "f.path, f.sha256, f.size, f.version, f.updated_at"
    };
}
pub(crate) use file_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct FileRow {
    pub path: String,
    pub sha256: Option<String>,
    pub size: i64,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ContentRow {
    #[sqlx(flatten)]
    pub file: FileRow,
    pub content: Vec<u8>,
}

impl TryFrom<FileRow> for WorkspaceFile {
    type Error = StoreError;

    fn try_from(r: FileRow) -> Result<Self, StoreError> {
        let sha256 = r
            .sha256
            .ok_or_else(|| super::corrupt(format!("file {:?} has no content", r.path)))?;
        Ok(WorkspaceFile {
            size: u64::try_from(r.size)
                .map_err(|_| super::corrupt(format!("file {:?} has size {}", r.path, r.size)))?,
            path: r.path,
            sha256,
            version: r.version,
            updated_at: r.updated_at,
        })
    }
}

impl TryFrom<ContentRow> for FileContent {
    type Error = StoreError;

    fn try_from(r: ContentRow) -> Result<Self, StoreError> {
        Ok(FileContent {
            file: r.file.try_into()?,
            content: r.content,
        })
    }
}
