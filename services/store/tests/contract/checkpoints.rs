//! `CheckpointStore`: sealed snapshots saved and read back as stored, newest first;
//! listings carry metadata only; another tenant sees none.

use crate::support::{Store, new_run, tenant};
use baton_core::model::CheckpointMeta;
use baton_core::ports::StoredCheckpoint;
use baton_events::CheckpointId;
use chrono::{SubsecRound, Utc};

fn checkpoint(through_version: i64, bytes: &[u8]) -> StoredCheckpoint {
    StoredCheckpoint {
        meta: CheckpointMeta {
            id: CheckpointId::new(),
            through_version,
            key_id: "k1".into(),
            size: 42,
            sha256: format!("{through_version:064}"),
            created_at: Utc::now().trunc_subsecs(6),
        },
        ciphertext: bytes.to_vec(),
    }
}

pub async fn checkpoints_round_trip_newest_first_and_list_without_contents<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let older = checkpoint(3, &[0, 1, 2, 255]);
    let newer = checkpoint(7, &[9; 32]);
    for c in [&older, &newer] {
        s.save_checkpoint(t, run, c).await.expect("save");
    }
    let latest = s.latest_checkpoints(t, run, 5).await.expect("latest");
    assert_eq!(latest, vec![newer.clone(), older.clone()]);
    let one = s.latest_checkpoints(t, run, 1).await.expect("latest");
    assert_eq!(one, vec![newer.clone()]);
    let listed = s.list_checkpoints(t, run).await.expect("list");
    assert_eq!(listed, vec![older.meta, newer.meta]);
}

pub async fn another_tenants_checkpoints_are_invisible<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let run = new_run(s, a).await;
    s.save_checkpoint(a, run, &checkpoint(2, b"sealed"))
        .await
        .expect("save");
    assert!(
        s.latest_checkpoints(b, run, 5)
            .await
            .expect("latest")
            .is_empty()
    );
    assert!(s.list_checkpoints(b, run).await.expect("list").is_empty());
}
