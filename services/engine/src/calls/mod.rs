//! A model step's tool calls: which may run ([`check`]), which run together
//! ([`batch`]) and what becomes of one left without a result ([`recovery`]).

pub(crate) mod batch;
pub(crate) mod check;
pub(crate) mod recovery;
