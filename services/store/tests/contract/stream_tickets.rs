//! Contract: a stream ticket is redeemed once, only before it expires and only for its
//! run, by whoever holds its hash, with what it was issued for; of redemptions at once
//! exactly one gets it; a new ticket forgets its tenant's expired ones and no other
//! tenant's.

use crate::support::*;
use baton_core::model::{IssuedBy, StreamTicket};
use baton_core::ports::StreamTicketStore;
use baton_events::{RunId, TenantId};
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

fn ticket(tenant: TenantId, issued_by: IssuedBy, at: DateTime<Utc>) -> StreamTicket {
    StreamTicket {
        id: Uuid::now_v7(),
        tenant,
        run: RunId::new(),
        issued_by,
        created_at: at,
        expires_at: at + TimeDelta::seconds(60),
    }
}

fn hash() -> Vec<u8> {
    Uuid::new_v4().as_bytes().repeat(2)
}

pub async fn a_ticket_is_redeemed_once_before_it_expires<S: Store + StreamTicketStore>(s: &S) {
    let a = tenant(s).await;
    let t0 = now();
    let by_key = IssuedBy::Key { token_hash: hash() };
    let (key_ticket, key_hash) = (ticket(a, by_key.clone(), t0), hash());
    s.create_stream_ticket(&key_ticket, &key_hash)
        .await
        .expect("create");
    let (local_ticket, local_hash) = (ticket(a, IssuedBy::Local, t0), hash());
    s.create_stream_ticket(&local_ticket, &local_hash)
        .await
        .expect("create");

    assert!(
        s.redeem_stream_ticket(&hash(), key_ticket.run, t0)
            .await
            .expect("redeem")
            .is_none(),
        "an unknown hash redeems nothing"
    );
    assert!(
        s.redeem_stream_ticket(&key_hash, RunId::new(), t0)
            .await
            .expect("redeem")
            .is_none(),
        "a ticket opens only its own run, and stays unused"
    );
    assert!(
        s.redeem_stream_ticket(&key_hash, key_ticket.run, key_ticket.expires_at)
            .await
            .expect("redeem")
            .is_none(),
        "at its expiry a ticket opens nothing"
    );
    let got = s
        .redeem_stream_ticket(&key_hash, key_ticket.run, t0 + TimeDelta::seconds(59))
        .await
        .expect("redeem")
        .expect("an unused ticket before its expiry");
    assert_eq!(
        (got.id, got.tenant, got.run, got.issued_by, got.expires_at),
        (
            key_ticket.id,
            a,
            key_ticket.run,
            by_key,
            key_ticket.expires_at
        )
    );
    assert!(
        s.redeem_stream_ticket(&key_hash, key_ticket.run, t0)
            .await
            .expect("redeem")
            .is_none(),
        "a used ticket opens nothing"
    );
    let local = s
        .redeem_stream_ticket(&local_hash, local_ticket.run, t0)
        .await
        .expect("redeem")
        .expect("the local owner's ticket");
    assert_eq!(local.issued_by, IssuedBy::Local);
}

pub async fn of_redemptions_at_once_exactly_one_gets_the_ticket<S: Store + StreamTicketStore>(
    s: &S,
) {
    let a = tenant(s).await;
    let t0 = now();
    let by_session = IssuedBy::Session { token_hash: hash() };
    let token_hash = hash();
    let made = ticket(a, by_session, t0);
    let run = made.run;
    s.create_stream_ticket(&made, &token_hash)
        .await
        .expect("create");
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let (s, token_hash) = (s.clone(), token_hash.clone());
            tokio::spawn(async move { s.redeem_stream_ticket(&token_hash, run, t0).await })
        })
        .collect();
    let mut opened = 0;
    for racer in racers {
        if racer.await.expect("join").expect("redeem").is_some() {
            opened += 1;
        }
    }
    assert_eq!(opened, 1);
}

pub async fn a_new_ticket_forgets_its_tenants_expired_ones<S: Store + StreamTicketStore>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let t0 = now();
    let (old_a, old_a_hash) = (ticket(a, IssuedBy::Local, t0), hash());
    let (old_b, old_b_hash) = (ticket(b, IssuedBy::Local, t0), hash());
    for (t, h) in [(&old_a, &old_a_hash), (&old_b, &old_b_hash)] {
        s.create_stream_ticket(t, h).await.expect("create");
    }
    // A's next ticket is made after A's first expired.
    let later = t0 + TimeDelta::seconds(120);
    s.create_stream_ticket(&ticket(a, IssuedBy::Local, later), &hash())
        .await
        .expect("create");
    // Redeemed as of before their expiry, which only a row still there could answer.
    assert!(
        s.redeem_stream_ticket(&old_a_hash, old_a.run, t0)
            .await
            .expect("redeem")
            .is_none(),
        "A's expired ticket is gone"
    );
    assert!(
        s.redeem_stream_ticket(&old_b_hash, old_b.run, t0)
            .await
            .expect("redeem")
            .is_some(),
        "B's is not A's to forget"
    );
}
