//! The TrainJob controller.
