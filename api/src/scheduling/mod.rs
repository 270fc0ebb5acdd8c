//! Typed models of the gang-scheduling PodGroups Trainforge emits. Their CRDs
//! come from the schedulers' own releases; these types only need to
//! (de)serialize with `apiVersion`/`kind`.

pub mod coscheduling;
pub mod volcano;
