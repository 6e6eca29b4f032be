//! Invitations: how a user becomes a member of a tenant.
//!
//! - `/v1/invitations` is the tenant's side (admins; an `owner` invitation needs an
//!   owner): invite an email with a role, list the invitations, revoke a pending one.
//!   Inviting answers the same whether or not an account has the email.
//! - `/v1/me/invitations` is the invited user's side, with a session token only: the
//!   pending invitations to the session's email, across tenants, and accepting (which
//!   makes the membership) or declining one. A pending invitation grants nothing.

use super::{InvitationPage, parse_cursor};
use crate::auth::{Caller, Identified};
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::routes::agents::ListQuery;
use crate::routes::sessions::Peer;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::auth::Identity;
use baton_core::members::NewMember;
use baton_core::model::{Invitation, InvitationToMe, Member, Session};
use uuid::Uuid;

/// Invite an email to the tenant (admin) with a role no higher than the caller's
/// (`owner` needs an owner). The answer is the same whether or not an account has the
/// email; the invitation lasts 7 days, and one pending for the email already answers
/// `409 already_exists`.
#[utoipa::path(post, path = "/v1/invitations", operation_id = "createInvitation", tag = "invitations", request_body = NewMember,
    responses((status = 201, body = Invitation), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewMember>,
) -> ApiResult<(StatusCode, axum::Json<Invitation>)> {
    let invitation = st.members.invite(&p, new).await?;
    Ok((StatusCode::CREATED, axum::Json(invitation)))
}

/// List the tenant's invitations, newest first, whatever their state (admin); the cursor
/// is the last id shown.
#[utoipa::path(get, path = "/v1/invitations", operation_id = "listInvitations", tag = "invitations", params(ListQuery),
    responses((status = 200, body = InvitationPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<InvitationPage>> {
    let before = parse_cursor::<Uuid>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.members.invitations(&p, before, q.limit).await?.into(),
    ))
}

/// Revoke a pending invitation (admin). One accepted, declined or revoked already answers
/// `409 wrong_state`.
#[utoipa::path(delete, path = "/v1/invitations/{invitation_id}", operation_id = "revokeInvitation", tag = "invitations",
    params(("invitation_id" = Uuid, Path, description = "The invitation's id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn revoke(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    st.members.revoke_invitation(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The pending, unexpired invitations to the session's email, in every tenant (a session
/// token only).
#[utoipa::path(get, path = "/v1/me/invitations", operation_id = "listMyInvitations", tag = "invitations",
    responses((status = 200, body = Vec<InvitationToMe>), (status = "4XX", body = Problem)))]
pub async fn mine(
    State(st): State<AppState>,
    Identified(identity): Identified,
) -> ApiResult<axum::Json<Vec<InvitationToMe>>> {
    let session = session(identity)?;
    Ok(axum::Json(st.invitations.mine(&session).await?))
}

/// Accept an invitation to the session's email (a session token only): the user becomes a
/// member of its tenant with its role. Someone else's, an expired or a decided invitation
/// answers `404`; a member of the tenant already, `409 already_exists`.
#[utoipa::path(post, path = "/v1/me/invitations/{invitation_id}/accept", operation_id = "acceptInvitation", tag = "invitations",
    params(("invitation_id" = Uuid, Path, description = "The invitation's id")),
    responses((status = 200, body = Member), (status = "4XX", body = Problem)))]
pub async fn accept(
    State(st): State<AppState>,
    Identified(identity): Identified,
    Peer(source): Peer,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<axum::Json<Member>> {
    let session = session(identity)?;
    Ok(axum::Json(
        st.invitations.accept(&session, id, source).await?,
    ))
}

/// Decline an invitation to the session's email (a session token only).
#[utoipa::path(post, path = "/v1/me/invitations/{invitation_id}/decline", operation_id = "declineInvitation", tag = "invitations",
    params(("invitation_id" = Uuid, Path, description = "The invitation's id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn decline(
    State(st): State<AppState>,
    Identified(identity): Identified,
    Peer(source): Peer,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    let session = session(identity)?;
    st.invitations.decline(&session, id, source).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's session: invitations are a person's, so an API key (or the embedded
/// tier's local owner) has none to act on.
fn session(identity: Identity) -> Result<Session, ApiError> {
    match identity {
        Identity::Session(session) => Ok(session),
        _ => Err(ApiError::new(
            Code::InvalidRequest,
            "only a session token acts on its user's invitations: log in with POST /v1/login",
        )),
    }
}
