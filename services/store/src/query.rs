//! [`Query`]: one SQL statement and its bound arguments, written once for both backends and
//! run by the [`Backend`] on a connection of `crate::pools` (a [`Conn`]). It is sqlx's
//! `query(..).bind(..)` and `QueryBuilder` in one type: a fixed statement numbers its
//! parameters (`$1`, `$2`, …) and binds them in order; a built one appends fixed SQL with
//! [`Query::push`] and each argument with [`Query::push_bind`], which writes its numbered
//! placeholder, so the two may be mixed. Input is always bound, never written into the
//! SQL: `push` takes only `&'static str`. Errors come back classified, as [`StoreError`]s.

use crate::backend::{Backend, Bind, Decode};
use crate::pools::Conn;
use baton_core::StoreError;
use sqlx::error::BoxDynError;
use sqlx::{Arguments, AssertSqlSafe};
use std::borrow::Cow;

/// Counts a statement sent (`baton_db_statements_total`), whether or not it succeeds.
fn count<B: Backend>() {
    metrics::counter!("baton_db_statements_total", "backend" => B::LABEL).increment(1);
}

/// A statement and its arguments for backend `B`.
pub struct Query<B: Backend> {
    sql: Cow<'static, str>,
    /// The arguments bound so far, or why binding one failed: reported when the query runs
    /// (as sqlx's `Query::bind` does), and nothing is sent.
    args: Result<B::Arguments, BoxDynError>,
}

impl<B: Backend> Query<B> {
    /// The statement `sql`, no arguments bound yet.
    pub fn new(sql: &'static str) -> Self {
        Query {
            sql: Cow::Borrowed(sql),
            args: Ok(B::Arguments::default()),
        }
    }

    /// Binds `value` as the next numbered parameter.
    pub fn bind<'t, T: Bind<'t>>(mut self, value: T) -> Self {
        if let Ok(args) = &mut self.args {
            let number = args.len() + 1;
            if let Err(e) = B::add(args, value) {
                self.args = Err(format!("Encoding argument ${number} failed: {e}").into());
            }
        }
        self
    }

    /// Appends `sql`, a fixed piece of the statement.
    pub fn push(&mut self, sql: &'static str) -> &mut Self {
        if !sql.is_empty() {
            self.sql.to_mut().push_str(sql);
        }
        self
    }

    /// The statement with `sql` appended, such as the backend's locking clause.
    pub fn suffix(mut self, sql: &'static str) -> Self {
        self.push(sql);
        self
    }

    /// Binds `value` as the next argument and appends its placeholder, numbered (`$N`,
    /// which both backends read as the Nth argument), so a built statement may follow a
    /// fixed one's `$1`, `$2`, … (SQLite's own unnumbered `?` would take the first
    /// argument after them instead of the next).
    pub fn push_bind<'t, T: Bind<'t>>(&mut self, value: T) -> &mut Self {
        if let Ok(args) = &mut self.args {
            match B::add(args, value) {
                Ok(()) => {
                    let number = args.len();
                    self.sql.to_mut().push_str(&format!("${number}"));
                }
                Err(e) => self.args = Err(e),
            }
        }
        self
    }

    /// Runs the statement on `conn`; the number of rows it changed.
    pub async fn execute(self, conn: &mut impl Conn<B>) -> Result<u64, StoreError> {
        count::<B>();
        B::execute(conn.connection(), self)
            .await
            .map_err(B::classify)
    }

    /// Every row the statement returns.
    pub async fn fetch_all<R: Decode>(self, conn: &mut impl Conn<B>) -> Result<Vec<R>, StoreError> {
        count::<B>();
        B::fetch_all(conn.connection(), self)
            .await
            .map_err(B::classify)
    }

    /// The first row the statement returns, if any.
    pub async fn fetch_optional<R: Decode>(
        self,
        conn: &mut impl Conn<B>,
    ) -> Result<Option<R>, StoreError> {
        count::<B>();
        B::fetch_optional(conn.connection(), self)
            .await
            .map_err(B::classify)
    }

    /// The first row the statement returns; an error when there is none.
    pub async fn fetch_one<R: Decode>(self, conn: &mut impl Conn<B>) -> Result<R, StoreError> {
        count::<B>();
        B::fetch_one(conn.connection(), self)
            .await
            .map_err(B::classify)
    }

    /// The statement and its arguments, for the backend to hand to sqlx; the error of a
    /// failed bind.
    pub(crate) fn into_parts(
        self,
    ) -> Result<(AssertSqlSafe<Cow<'static, str>>, B::Arguments), sqlx::Error> {
        let args = self.args.map_err(sqlx::Error::Encode)?;
        // Only fixed pieces of SQL were written into it: input is bound.
        Ok((AssertSqlSafe(self.sql), args))
    }
}
