//! Contract: sealed tenant secrets round-trip byte for byte, upsert by name, list as
//! metadata in byte-wise name order, delete, and stay within their tenant.

use crate::support::*;
use baton_core::StoreError;
use baton_core::crypto::Sealed;
use baton_core::model::SecretMeta;
use baton_events::TenantId;
use chrono::Duration;

/// An envelope-like value: the store must keep every byte, NULs and high bytes included.
fn sealed(key_id: &str, fill: u8) -> Sealed {
    let mut bytes = vec![1, key_id.len() as u8];
    bytes.extend_from_slice(key_id.as_bytes());
    bytes.extend([0u8, 0xff, fill, 0x00, 0x80]);
    bytes.extend(std::iter::repeat_n(fill, 40));
    Sealed {
        key_id: key_id.into(),
        bytes,
    }
}

pub async fn a_secret_round_trips_sealed_bytes_and_metadata<S: Store>(s: &S) {
    let t = tenant(s).await;
    let at = now();
    let value = sealed("k1", 7);
    let meta = s
        .put_secret(t, "openai_key", &value, at, &audited())
        .await
        .expect("put");
    let expected = SecretMeta {
        name: "openai_key".into(),
        key_id: "k1".into(),
        created_at: at,
        updated_at: at,
    };
    assert_eq!(meta, expected);
    let stored = s
        .get_secret(t, "openai_key")
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(stored.meta, expected);
    assert_eq!(stored.ciphertext, value.bytes);
    assert_eq!(s.get_secret(t, "other").await.expect("get"), None);
    assert_eq!(s.get_secret(t, "OPENAI_KEY").await.expect("get"), None);
}

pub async fn putting_a_taken_name_replaces_the_value_and_keeps_created_at<S: Store>(s: &S) {
    let t = tenant(s).await;
    let first_at = now();
    s.put_secret(t, "token", &sealed("old", 1), first_at, &audited())
        .await
        .expect("put");
    let later = first_at + Duration::seconds(5);
    let replacement = sealed("new", 2);
    let meta = s
        .put_secret(t, "token", &replacement, later, &audited())
        .await
        .expect("put again");
    assert_eq!(meta.key_id, "new");
    assert_eq!(meta.created_at, first_at);
    assert_eq!(meta.updated_at, later);
    let stored = s.get_secret(t, "token").await.expect("get").expect("row");
    assert_eq!(stored.meta, meta);
    assert_eq!(stored.ciphertext, replacement.bytes);
    assert_eq!(s.list_secrets(t, None, 10).await.expect("list").len(), 1);
}

pub async fn secrets_list_as_metadata_in_name_order_with_a_cursor<S: Store>(s: &S) {
    let t = tenant(s).await;
    assert_eq!(s.list_secrets(t, None, 10).await.expect("list"), vec![]);
    let at = now();
    for (i, name) in ["beta", "Alpha", "alpha", "_under", "a-1", "a1"]
        .into_iter()
        .enumerate()
    {
        let key = format!("key{i}");
        s.put_secret(t, name, &sealed(&key, i as u8), at, &audited())
            .await
            .expect("put");
    }
    let names = |page: &[SecretMeta]| page.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    let all = s.list_secrets(t, None, 10).await.expect("list");
    assert_eq!(
        names(&all),
        ["Alpha", "_under", "a-1", "a1", "alpha", "beta"],
        "byte-wise order on every backend"
    );
    let alpha = all.iter().find(|m| m.name == "Alpha").expect("Alpha");
    assert_eq!(alpha.key_id, "key1");
    assert_eq!((alpha.created_at, alpha.updated_at), (at, at));

    let first = s.list_secrets(t, None, 4).await.expect("list");
    assert_eq!(names(&first), ["Alpha", "_under", "a-1", "a1"]);
    let rest = s.list_secrets(t, Some("a1"), 4).await.expect("list");
    assert_eq!(names(&rest), ["alpha", "beta"]);
    let none = s.list_secrets(t, Some("beta"), 4).await.expect("list");
    assert_eq!(none, vec![]);
}

pub async fn delete_reports_whether_the_secret_existed<S: Store>(s: &S) {
    let t = tenant(s).await;
    s.put_secret(t, "gone", &sealed("k", 3), now(), &audited())
        .await
        .expect("put");
    s.put_secret(t, "kept", &sealed("k", 4), now(), &audited())
        .await
        .expect("put");
    assert!(
        s.delete_secret(t, "gone", &audited())
            .await
            .expect("delete")
    );
    assert!(
        !s.delete_secret(t, "gone", &audited())
            .await
            .expect("delete again")
    );
    assert!(
        !s.delete_secret(t, "never", &audited())
            .await
            .expect("delete unknown")
    );
    assert_eq!(s.get_secret(t, "gone").await.expect("get"), None);
    let left = s.list_secrets(t, None, 10).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "kept");
    // The name is free again.
    s.put_secret(t, "gone", &sealed("k", 5), now(), &audited())
        .await
        .expect("put again");
}

pub async fn another_tenant_can_neither_read_list_nor_delete_a_secret<S: Store>(s: &S) {
    let alice = tenant(s).await;
    let mallory = tenant(s).await;
    let at = now();
    let value = sealed("k", 9);
    s.put_secret(alice, "shared_name", &value, at, &audited())
        .await
        .expect("put");

    assert_eq!(
        s.get_secret(mallory, "shared_name").await.expect("get"),
        None
    );
    assert_eq!(
        s.list_secrets(mallory, None, 10).await.expect("list"),
        vec![]
    );
    assert!(
        !s.delete_secret(mallory, "shared_name", &audited())
            .await
            .expect("delete")
    );

    // Mallory's secret of the same name is hers alone and leaves Alice's untouched.
    let later = at + Duration::seconds(1);
    let hers = s
        .put_secret(mallory, "shared_name", &sealed("m", 1), later, &audited())
        .await
        .expect("put");
    assert_eq!(hers.created_at, later, "a new row, not Alice's");
    let alices = s
        .get_secret(alice, "shared_name")
        .await
        .expect("get")
        .expect("still there");
    assert_eq!(alices.ciphertext, value.bytes);
    assert_eq!(alices.meta.updated_at, at);
    assert!(
        s.delete_secret(mallory, "shared_name", &audited())
            .await
            .expect("delete")
    );
    assert!(
        s.get_secret(alice, "shared_name")
            .await
            .expect("get")
            .is_some()
    );
}

pub async fn a_secret_of_an_unknown_tenant_is_not_found<S: Store>(s: &S) {
    let unknown = s
        .put_secret(
            TenantId::new(),
            "orphan",
            &sealed("k", 0),
            now(),
            &audited(),
        )
        .await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}
