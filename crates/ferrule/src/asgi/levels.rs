//! Log level numbers: `logging`'s, and uvicorn's TRACE below DEBUG, which Python takes from
//! here (`ferrule._ferrule.TRACE`).

pub const TRACE: u8 = 5;
pub const INFO: u8 = 20;
pub const WARNING: u8 = 30;
pub const ERROR: u8 = 40;
