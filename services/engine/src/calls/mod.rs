//! A model step's tool calls: which may run ([`check`]), which run together
//! ([`batch`]), what becomes of one left without a result ([`recovery`]), and carrying
//! them out ([`execute`]), landing a workspace tool's files with its result
//! ([`promote`]).

pub(crate) mod batch;
pub(crate) mod check;
pub(crate) mod execute;
pub(crate) mod promote;
pub(crate) mod recovery;
