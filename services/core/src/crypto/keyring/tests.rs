use super::*;

const K1: [u8; KEY_LEN] = [0x11; KEY_LEN];
const K2: [u8; KEY_LEN] = [0x22; KEY_LEN];

fn ring(keys: &[(&str, [u8; KEY_LEN])], active: &str) -> Keyring {
    let keys = keys.iter().map(|(id, key)| (id.to_string(), *key));
    Keyring::new(keys, active).expect("valid ring")
}

fn tenant() -> TenantId {
    TenantId::new()
}

fn checkpoint_aad(tenant: TenantId, run: RunId, checkpoint: CheckpointId) -> Aad {
    Aad::checkpoint(tenant, run, checkpoint)
}

/// Offset of the nonce in an envelope sealed under `key_id`.
fn nonce_offset(key_id: &str) -> usize {
    2 + key_id.len()
}

fn flip(bytes: &[u8], index: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[index] ^= 0x01;
    out
}

fn config(entries: &[(&str, &str)]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|(id, key)| (id.to_string(), key.to_string()))
        .collect()
}

// --- round trip and envelope ---

#[test]
fn seal_then_open_returns_the_plaintext() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "OPENAI_API_KEY");
    for plaintext in [
        &b""[..],
        b"x",
        b"a longer secret value, more than one block long",
    ] {
        let sealed = ring.seal(&aad, plaintext).expect("seal");
        assert_eq!(sealed.key_id, "k1");
        assert_ne!(sealed.bytes.as_slice(), plaintext);
        assert_eq!(ring.open(&aad, &sealed.bytes).expect("open"), plaintext);
    }
}

#[test]
fn envelope_has_the_documented_layout() {
    let ring = ring(&[("key-2024.a", K1)], "key-2024.a");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"hello").expect("seal");
    let bytes = &sealed.bytes;
    assert_eq!(bytes[0], 1, "format version");
    assert_eq!(usize::from(bytes[1]), "key-2024.a".len());
    assert_eq!(&bytes[2..12], b"key-2024.a");
    assert_eq!(bytes.len(), 2 + 10 + NONCE_LEN + 5 + TAG_LEN);
    assert_eq!(key_id_of(bytes).expect("key id"), "key-2024.a");
}

#[test]
fn two_seals_of_the_same_plaintext_differ() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let a = ring.seal(&aad, b"same").expect("seal");
    let b = ring.seal(&aad, b"same").expect("seal");
    assert_ne!(a.bytes, b.bytes);
    let offset = nonce_offset("k1");
    assert_ne!(
        a.bytes[offset..offset + NONCE_LEN],
        b.bytes[offset..offset + NONCE_LEN]
    );
}

#[test]
fn ephemeral_ring_round_trips_under_its_one_key() {
    let ring = Keyring::ephemeral();
    assert_eq!(ring.active_id(), EPHEMERAL_KEY_ID);
    assert_eq!(ring.ids().collect::<Vec<_>>(), vec![EPHEMERAL_KEY_ID]);
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"v").expect("seal");
    assert_eq!(ring.open(&aad, &sealed.bytes).expect("open"), b"v");
    let other = Keyring::ephemeral();
    assert!(matches!(
        other.open(&aad, &sealed.bytes),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn generated_keys_differ() {
    assert_ne!(Keyring::generate_key(), Keyring::generate_key());
}

// --- tampering ---

#[test]
fn flipping_a_ciphertext_byte_fails() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"some plaintext").expect("seal");
    let first_ciphertext_byte = nonce_offset("k1") + NONCE_LEN;
    let tampered = flip(&sealed.bytes, first_ciphertext_byte);
    assert!(matches!(
        ring.open(&aad, &tampered),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn flipping_a_nonce_byte_fails() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"some plaintext").expect("seal");
    let tampered = flip(&sealed.bytes, nonce_offset("k1"));
    assert!(matches!(
        ring.open(&aad, &tampered),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn flipping_a_tag_byte_fails() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"some plaintext").expect("seal");
    let last = sealed.bytes.len() - 1;
    let tampered = flip(&sealed.bytes, last);
    assert!(matches!(
        ring.open(&aad, &tampered),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn envelope_renamed_to_another_key_in_the_ring_fails() {
    let ring = ring(&[("k1", K1), ("k2", K2)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"v").expect("seal");
    let mut renamed = sealed.bytes.clone();
    renamed[2..4].copy_from_slice(b"k2");
    assert_eq!(key_id_of(&renamed).expect("key id"), "k2");
    assert!(matches!(
        ring.open(&aad, &renamed),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn unknown_key_id_fails_with_unknown_key() {
    let writer = ring(&[("k9", K1)], "k9");
    let reader = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = writer.seal(&aad, b"v").expect("seal");
    match reader.open(&aad, &sealed.bytes) {
        Err(CryptoError::UnknownKey(id)) => assert_eq!(id, "k9"),
        other => panic!("expected UnknownKey, got {other:?}"),
    }
}

#[test]
fn truncated_or_garbage_envelopes_are_malformed() {
    let ring = ring(&[("k1", K1)], "k1");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"v").expect("seal");
    let minimum = nonce_offset("k1") + NONCE_LEN + TAG_LEN;
    for len in 0..minimum {
        let cut = &sealed.bytes[..len];
        assert!(
            matches!(ring.open(&aad, cut), Err(CryptoError::Malformed)),
            "length {len}"
        );
        assert!(matches!(key_id_of(cut), Err(CryptoError::Malformed)));
    }
    let mut wrong_version = sealed.bytes.clone();
    wrong_version[0] = 2;
    let mut empty_id = sealed.bytes.clone();
    empty_id[1] = 0;
    let mut bad_id = sealed.bytes.clone();
    bad_id[2] = b'/';
    let mut long_id = vec![1u8, 65];
    long_id.extend_from_slice(&[b'a'; 65 + NONCE_LEN + TAG_LEN]);
    for garbage in [wrong_version, empty_id, bad_id, long_id, vec![0xff; 40]] {
        assert!(matches!(
            ring.open(&aad, &garbage),
            Err(CryptoError::Malformed)
        ));
        assert!(matches!(key_id_of(&garbage), Err(CryptoError::Malformed)));
    }
}

// --- associated data binding ---

#[test]
fn secret_moved_to_another_tenant_or_name_fails() {
    let ring = ring(&[("k1", K1)], "k1");
    let owner = tenant();
    let sealed = ring
        .seal(&Aad::secret(owner, "API_KEY"), b"v")
        .expect("seal");
    for aad in [
        Aad::secret(tenant(), "API_KEY"),
        Aad::secret(owner, "OTHER"),
    ] {
        assert!(matches!(
            ring.open(&aad, &sealed.bytes),
            Err(CryptoError::Decrypt)
        ));
    }
}

#[test]
fn checkpoint_moved_to_another_tenant_run_or_id_fails() {
    let ring = ring(&[("k1", K1)], "k1");
    let (t, r, c) = (tenant(), RunId::new(), CheckpointId::new());
    let sealed = ring.seal(&checkpoint_aad(t, r, c), b"state").expect("seal");
    assert_eq!(
        ring.open(&checkpoint_aad(t, r, c), &sealed.bytes)
            .expect("open"),
        b"state"
    );
    let moved = [
        checkpoint_aad(tenant(), r, c),
        checkpoint_aad(t, RunId::new(), c),
        checkpoint_aad(t, r, CheckpointId::new()),
    ];
    for aad in moved {
        assert!(matches!(
            ring.open(&aad, &sealed.bytes),
            Err(CryptoError::Decrypt)
        ));
    }
}

#[test]
fn secret_opened_as_a_checkpoint_fails_and_back() {
    let ring = ring(&[("k1", K1)], "k1");
    let t = tenant();
    let secret = ring.seal(&Aad::secret(t, "s"), b"v").expect("seal");
    let checkpoint_aad = checkpoint_aad(t, RunId::new(), CheckpointId::new());
    assert!(matches!(
        ring.open(&checkpoint_aad, &secret.bytes),
        Err(CryptoError::Decrypt)
    ));
    let checkpoint = ring.seal(&checkpoint_aad, b"v").expect("seal");
    assert!(matches!(
        ring.open(&Aad::secret(t, "s"), &checkpoint.bytes),
        Err(CryptoError::Decrypt)
    ));
}

#[test]
fn aad_encodings_of_different_tuples_differ() {
    let t = tenant();
    let r = RunId::new();
    let c = CheckpointId::new();
    // Same UUID in different positions, and names that would collide if concatenated.
    let u = t.as_uuid();
    let all = [
        Aad::secret(t, ""),
        Aad::secret(t, "a"),
        Aad::secret(t, "ab"),
        Aad::secret(TenantId(u), "a\0"),
        Aad::secret(TenantId(r.as_uuid()), "a"),
        Aad::checkpoint(t, r, c),
        Aad::checkpoint(t, RunId(c.as_uuid()), CheckpointId(r.as_uuid())),
        Aad::checkpoint(TenantId(r.as_uuid()), RunId(u), c),
    ];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a.as_bytes(), b.as_bytes());
        }
    }
    assert_eq!(Aad::secret(t, "a"), Aad::secret(t, "a"));
}

// --- rotation ---

#[test]
fn rotation_keeps_old_records_readable_and_reseal_moves_them() {
    let aad = checkpoint_aad(tenant(), RunId::new(), CheckpointId::new());
    let old_ring = ring(&[("k1", K1)], "k1");
    let old = old_ring.seal(&aad, b"old record").expect("seal");

    let rotated = ring(&[("k1", K1), ("k2", K2)], "k2");
    assert_eq!(rotated.open(&aad, &old.bytes).expect("open"), b"old record");
    let new = rotated.seal(&aad, b"new record").expect("seal");
    assert_eq!(new.key_id, "k2");
    assert_eq!(key_id_of(&new.bytes).expect("key id"), "k2");

    let moved = rotated
        .reseal(&aad, &old.bytes)
        .expect("reseal")
        .expect("old record moves to the active key");
    assert_eq!(moved.key_id, "k2");
    assert!(
        rotated
            .reseal(&aad, &moved.bytes)
            .expect("reseal")
            .is_none()
    );
    assert!(rotated.reseal(&aad, &new.bytes).expect("reseal").is_none());

    let retired = ring(&[("k2", K2)], "k2");
    assert_eq!(
        retired.open(&aad, &moved.bytes).expect("open"),
        b"old record"
    );
    assert!(matches!(
        retired.open(&aad, &old.bytes),
        Err(CryptoError::UnknownKey(id)) if id == "k1"
    ));
}

#[test]
fn reseal_with_the_wrong_aad_fails_and_writes_nothing() {
    let old = ring(&[("k1", K1)], "k1")
        .seal(&Aad::secret(tenant(), "s"), b"v")
        .expect("seal");
    let rotated = ring(&[("k1", K1), ("k2", K2)], "k2");
    assert!(matches!(
        rotated.reseal(&Aad::secret(tenant(), "s"), &old.bytes),
        Err(CryptoError::Decrypt)
    ));
}

// --- construction ---

#[test]
fn new_refuses_bad_rings() {
    let none: [(String, [u8; KEY_LEN]); 0] = [];
    assert!(matches!(Keyring::new(none, "k1"), Err(CryptoError::NoKeys)));
    let dup = [("k1".to_string(), K1), ("k1".to_string(), K2)];
    assert!(matches!(
        Keyring::new(dup, "k1"),
        Err(CryptoError::DuplicateKeyId(id)) if id == "k1"
    ));
    for bad in ["", "has space", "slash/id", "é", &"a".repeat(65)] {
        assert!(
            matches!(
                Keyring::new([(bad.to_string(), K1)], bad),
                Err(CryptoError::InvalidKeyId(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        Keyring::new([("k1".to_string(), K1)], "k2"),
        Err(CryptoError::ActiveKeyMissing(id)) if id == "k2"
    ));
}

#[test]
fn ring_reports_its_ids() {
    let longest = "A".repeat(MAX_KEY_ID_LEN);
    let ring = Keyring::new(
        [
            ("k2".to_string(), K2),
            ("k.1_x-Y".to_string(), K1),
            (longest.clone(), K1),
        ],
        "k2",
    )
    .expect("valid ring");
    assert_eq!(ring.active_id(), "k2");
    assert_eq!(
        ring.ids().collect::<Vec<_>>(),
        vec![longest.as_str(), "k.1_x-Y", "k2"]
    );
    assert!(ring.contains("k.1_x-Y"));
    assert!(!ring.contains("k3"));
}

#[test]
fn from_config_accepts_base64_keys() {
    let k1 = BASE64.encode(K1);
    let k2 = BASE64.encode(K2);
    let ring = Keyring::from_config(&config(&[("k1", &k1), ("k2", &k2)]), "k2").expect("ring");
    let aad = Aad::secret(tenant(), "s");
    let sealed = ring.seal(&aad, b"v").expect("seal");
    assert_eq!(sealed.key_id, "k2");
    let only_k2 = Keyring::new([("k2".to_string(), K2)], "k2").expect("ring");
    assert_eq!(only_k2.open(&aad, &sealed.bytes).expect("open"), b"v");
}

#[test]
fn from_config_refuses_bad_keys_without_printing_them() {
    let good = BASE64.encode(K1);
    let not_base64 = format!("{}!!", &good[..40]);
    let short = BASE64.encode([0x33u8; 16]);
    let long = BASE64.encode([0x44u8; 33]);

    let err = Keyring::from_config(&config(&[("k1", &not_base64)]), "k1").expect_err("bad base64");
    assert!(matches!(&err, CryptoError::KeyEncoding(id) if id == "k1"));
    assert_no_key_in(&err, &not_base64);

    for (key, len) in [(&short, 16), (&long, 33)] {
        let err = Keyring::from_config(&config(&[("k1", key)]), "k1").expect_err("wrong length");
        assert!(matches!(&err, CryptoError::KeyLength { id, len: l } if id == "k1" && *l == len));
        assert_no_key_in(&err, key);
    }

    let err = Keyring::from_config(&config(&[("k1", &good)]), "k2").expect_err("unknown active");
    assert!(matches!(&err, CryptoError::ActiveKeyMissing(id) if id == "k2"));
    assert_no_key_in(&err, &good);

    let err = Keyring::from_config(&config(&[("k1", &good), ("k1", &good)]), "k1")
        .expect_err("duplicate id");
    assert!(matches!(&err, CryptoError::DuplicateKeyId(id) if id == "k1"));
    assert_no_key_in(&err, &good);

    let err =
        Keyring::from_config(&config(&[("bad id", &not_base64)]), "bad id").expect_err("bad id");
    assert!(matches!(&err, CryptoError::InvalidKeyId(_)));
    assert_no_key_in(&err, &not_base64);

    assert!(matches!(
        Keyring::from_config(&[], "k1"),
        Err(CryptoError::NoKeys)
    ));
}

fn assert_no_key_in(err: &CryptoError, key: &str) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(key), "{shown}");
    assert!(!shown.contains(&key[..8]), "{shown}");
}

#[test]
fn debug_shows_ids_but_no_key_bytes() {
    let key: [u8; KEY_LEN] = std::array::from_fn(|i| i as u8 * 7 + 3);
    let ring = Keyring::from_config(&config(&[("k1", &BASE64.encode(key))]), "k1").expect("ring");
    let shown = format!("{ring:?} {ring:#?}");
    assert!(shown.contains("k1"));
    assert!(!shown.contains(&BASE64.encode(key)));
    assert!(!shown.contains(&hex::encode(key)));
    assert!(!shown.contains(&hex::encode(&key[..4])));
    assert!(!shown.contains(&format!("{:?}", &key[..4])));
    assert_eq!(shown.matches("Keyring").count(), 2);
}
