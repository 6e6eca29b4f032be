//! Contract: a tenant's invitations list newest first and stay within their tenant; one
//! per email is pending at a time; a revoked, declined or accepted invitation is decided
//! for good. The invited email alone finds and decides an invitation, only while it is
//! unexpired; accepting makes the membership, the invitation's state and its audit entry
//! in one transaction, writes nothing for a member already, and two decisions racing on
//! one invitation have exactly one winner.

use crate::support::*;
use baton_core::model::{
    AuditAction, AuditEntry, Invitation, InvitationState, Member, OPERATOR, User,
};
use baton_core::ports::{AuditQuery, AuditStore, Decided, InvitationStore, UserStore};
use baton_core::{Role, StoreError};
use baton_events::TenantId;
use chrono::Duration;
use uuid::Uuid;

/// A pending invitation of `tenant` to `email` as a member, for a week.
pub fn invitation(tenant: TenantId, email: &str) -> Invitation {
    let at = now();
    Invitation {
        id: Uuid::now_v7(),
        tenant_id: tenant,
        email: email.into(),
        role: Role::Member,
        invited_by: OPERATOR.into(),
        created_at: at,
        expires_at: at + Duration::days(7),
        state: InvitationState::Pending,
        decided_at: None,
    }
}

async fn invite<S: InvitationStore>(s: &S, tenant: TenantId, email: &str) -> Invitation {
    let i = invitation(tenant, email);
    s.create_invitation(tenant, &i, &audited())
        .await
        .expect("create invitation");
    i
}

async fn user<S: UserStore>(s: &S) -> User {
    let u = User {
        id: Uuid::now_v7(),
        email: format!("{}@example.com", Uuid::new_v4().simple()),
        created_at: now(),
    };
    s.create_user(&u, "$argon2id$hash").await.expect("user");
    u
}

/// The entry a user's decision writes.
fn decision(u: &User, action: AuditAction) -> AuditEntry {
    AuditEntry {
        actor: format!("user:{}", u.id),
        ..AuditEntry::operator(now(), action, u.id.to_string(), serde_json::json!({}))
    }
}

async fn state_of<S: InvitationStore>(s: &S, i: &Invitation) -> InvitationState {
    let got = s
        .get_invitation(i.tenant_id, i.id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!((got.id, &got.email, got.role), (i.id, &i.email, i.role));
    assert_eq!(
        got.decided_at.is_some(),
        got.state != InvitationState::Pending
    );
    got.state
}

async fn actions<S: AuditStore>(s: &S, tenant: TenantId) -> Vec<AuditAction> {
    s.list_audit(
        tenant,
        &AuditQuery {
            limit: 100,
            ..AuditQuery::default()
        },
    )
    .await
    .expect("audit")
    .into_iter()
    .map(|e| e.action)
    .collect()
}

pub async fn invitations_list_newest_first_one_pending_per_email_and_stay_in_their_tenant<
    S: Store + InvitationStore,
>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let first = invite(s, a, "ada@example.com").await;
    let second = invite(s, a, "bob@example.com").await;
    let listed = s.list_invitations(a, None, 10).await.expect("list");
    assert_eq!(listed, vec![second.clone(), first.clone()]);
    let older = s
        .list_invitations(a, Some(second.id), 10)
        .await
        .expect("page");
    assert_eq!(older, vec![first.clone()]);

    let again = s
        .create_invitation(a, &invitation(a, "ada@example.com"), &audited())
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    // Another tenant may invite the same email, and sees nothing of A's.
    invite(s, b, "ada@example.com").await;
    assert_eq!(
        s.list_invitations(b, None, 10).await.expect("list").len(),
        1
    );
    assert!(
        !s.revoke_invitation(b, first.id, now(), &audited())
            .await
            .expect("revoke"),
        "B revoked A's invitation"
    );
    assert_eq!(state_of(s, &first).await, InvitationState::Pending);
    assert_eq!(s.get_invitation(b, first.id).await.expect("get"), None);

    assert!(
        s.revoke_invitation(a, first.id, now(), &audited())
            .await
            .expect("revoke")
    );
    assert!(
        !s.revoke_invitation(a, first.id, now(), &audited())
            .await
            .expect("again")
    );
    assert_eq!(state_of(s, &first).await, InvitationState::Revoked);
    // Revoked, it no longer holds the email.
    invite(s, a, "ada@example.com").await;

    let unknown = s
        .create_invitation(
            TenantId::new(),
            &invitation(TenantId::new(), "x@example.com"),
            &audited(),
        )
        .await;
    assert!(matches!(unknown, Err(StoreError::NotFound)), "{unknown:?}");
}

pub async fn accepting_makes_the_membership_and_its_entry_together<
    S: Store + InvitationStore + UserStore,
>(
    s: &S,
) {
    let tenant = tenant(s).await;
    let ada = user(s).await;
    let i = invite(s, tenant, &ada.email).await;

    let mine = s.invitations_to(&ada.email, now(), 10).await.expect("mine");
    assert_eq!(mine.len(), 1);
    assert_eq!(
        (mine[0].id, mine[0].tenant_id, mine[0].role),
        (i.id, tenant, Role::Member)
    );
    assert!(mine[0].tenant_name.starts_with("tenant-"), "{:?}", mine[0]);
    assert!(s.get_member(tenant, ada.id).await.expect("get").is_none());

    let entry = decision(&ada, AuditAction::MemberAdded);
    let decided = s
        .accept_invitation(i.id, &ada.email, ada.id, now(), &entry)
        .await
        .expect("accept");
    let Decided::Done(Some(member)) = decided else {
        panic!("not accepted: {decided:?}");
    };
    assert_eq!((member.user_id, member.role), (ada.id, Role::Member));
    assert_eq!(
        s.get_member(tenant, ada.id).await.expect("get"),
        Some(Member {
            email: ada.email.clone(),
            ..member
        })
    );
    assert_eq!(state_of(s, &i).await, InvitationState::Accepted);
    let added = &s
        .list_audit(
            tenant,
            &AuditQuery {
                limit: 1,
                ..AuditQuery::default()
            },
        )
        .await
        .expect("audit")[0];
    assert_eq!(added.action, AuditAction::MemberAdded);
    assert_eq!(
        added.details["role"], "member",
        "the entry names the role it gave"
    );
    assert!(
        s.invitations_to(&ada.email, now(), 10)
            .await
            .expect("mine")
            .is_empty()
    );

    let again = s
        .accept_invitation(i.id, &ada.email, ada.id, now(), &entry)
        .await
        .expect("again");
    assert_eq!(again, Decided::NotFound);
    let declined = s
        .decline_invitation(
            i.id,
            &ada.email,
            now(),
            &decision(&ada, AuditAction::InvitationDeclined),
        )
        .await
        .expect("decline");
    assert_eq!(declined, Decided::NotFound);
}

pub async fn only_the_invited_email_decides_and_only_before_expiry<
    S: Store + InvitationStore + UserStore,
>(
    s: &S,
) {
    let tenant = tenant(s).await;
    let (ada, eve) = (user(s).await, user(s).await);
    let i = invite(s, tenant, &ada.email).await;
    assert!(
        s.invitations_to(&eve.email, now(), 10)
            .await
            .expect("eve's")
            .is_empty()
    );
    let stolen = s
        .accept_invitation(
            i.id,
            &eve.email,
            eve.id,
            now(),
            &decision(&eve, AuditAction::MemberAdded),
        )
        .await
        .expect("accept");
    assert_eq!(stolen, Decided::NotFound);
    assert!(s.get_member(tenant, eve.id).await.expect("get").is_none());

    let late = i.expires_at + Duration::seconds(1);
    assert!(
        s.invitations_to(&ada.email, late, 10)
            .await
            .expect("late")
            .is_empty()
    );
    let expired = s
        .accept_invitation(
            i.id,
            &ada.email,
            ada.id,
            late,
            &decision(&ada, AuditAction::MemberAdded),
        )
        .await
        .expect("accept late");
    assert_eq!(expired, Decided::NotFound);
    assert_eq!(state_of(s, &i).await, InvitationState::Pending);

    let declined = s
        .decline_invitation(
            i.id,
            &ada.email,
            now(),
            &decision(&ada, AuditAction::InvitationDeclined),
        )
        .await
        .expect("decline");
    assert_eq!(declined, Decided::Done(None));
    assert_eq!(state_of(s, &i).await, InvitationState::Declined);
    assert_eq!(actions(s, tenant).await[0], AuditAction::InvitationDeclined);
    let after = s
        .accept_invitation(
            i.id,
            &ada.email,
            ada.id,
            now(),
            &decision(&ada, AuditAction::MemberAdded),
        )
        .await
        .expect("accept declined");
    assert_eq!(after, Decided::NotFound);
    assert!(s.get_member(tenant, ada.id).await.expect("get").is_none());
}

pub async fn accepting_as_a_member_already_writes_nothing<
    S: Store + InvitationStore + UserStore,
>(
    s: &S,
) {
    let tenant = tenant(s).await;
    let ada = user(s).await;
    let joined = Member {
        user_id: ada.id,
        email: ada.email.clone(),
        role: Role::Admin,
        created_at: now(),
    };
    s.add_member(tenant, &joined, &audited())
        .await
        .expect("member");
    let i = invite(s, tenant, &ada.email).await;
    let before = actions(s, tenant).await;
    let decided = s
        .accept_invitation(
            i.id,
            &ada.email,
            ada.id,
            now(),
            &decision(&ada, AuditAction::MemberAdded),
        )
        .await
        .expect("accept");
    assert_eq!(decided, Decided::AlreadyMember);
    assert_eq!(state_of(s, &i).await, InvitationState::Pending);
    assert_eq!(actions(s, tenant).await, before);
    assert_eq!(
        s.get_member(tenant, ada.id)
            .await
            .expect("get")
            .map(|m| m.role),
        Some(Role::Admin)
    );
}

pub async fn racing_decisions_on_one_invitation_have_one_winner<
    S: Store + InvitationStore + UserStore,
>(
    s: &S,
) {
    for _ in 0..5 {
        let tenant = tenant(s).await;
        let ada = user(s).await;
        let i = invite(s, tenant, &ada.email).await;
        let accept = {
            let (s, ada) = (s.clone(), ada.clone());
            tokio::spawn(async move {
                s.accept_invitation(
                    i.id,
                    &ada.email,
                    ada.id,
                    now(),
                    &decision(&ada, AuditAction::MemberAdded),
                )
                .await
                .expect("accept")
            })
        };
        let decline = {
            let (s, ada) = (s.clone(), ada.clone());
            tokio::spawn(async move {
                s.decline_invitation(
                    i.id,
                    &ada.email,
                    now(),
                    &decision(&ada, AuditAction::InvitationDeclined),
                )
                .await
                .expect("decline")
            })
        };
        let revoke = {
            let s = s.clone();
            tokio::spawn(async move {
                let entry = AuditEntry::operator(
                    now(),
                    AuditAction::InvitationRevoked,
                    i.id.to_string(),
                    serde_json::json!({}),
                );
                s.revoke_invitation(tenant, i.id, now(), &entry)
                    .await
                    .expect("revoke")
            })
        };
        let (accepted, declined, revoked) = (
            accept.await.expect("join"),
            decline.await.expect("join"),
            revoke.await.expect("join"),
        );
        let winners = [
            matches!(accepted, Decided::Done(_)),
            matches!(declined, Decided::Done(_)),
            revoked,
        ];
        assert_eq!(
            winners.iter().filter(|w| **w).count(),
            1,
            "{accepted:?} {declined:?} {revoked}"
        );
        let member = s.get_member(tenant, ada.id).await.expect("get").is_some();
        assert_eq!(member, winners[0]);
        let decisions = actions(s, tenant)
            .await
            .into_iter()
            .filter(|a| {
                [
                    AuditAction::MemberAdded,
                    AuditAction::InvitationDeclined,
                    AuditAction::InvitationRevoked,
                ]
                .contains(a)
            })
            .count();
        assert_eq!(decisions, 1, "one decision is audited");
    }
}
