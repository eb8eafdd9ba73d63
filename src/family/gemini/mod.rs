pub mod frames;
pub mod usage;
