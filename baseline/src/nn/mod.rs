//! Neural-network modules: the building blocks and the five FB-CPR-Aux networks.

pub mod layers;
pub mod networks;

pub use layers::sphere_norm;
pub use networks::{Actor, BackwardMap, Discriminator, ForwardMap, sample_action};
