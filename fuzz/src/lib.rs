//! What the fuzz targets share: the map-backed test host of tally-host-api (feature
//! `testing`), re-exported under the name the targets have always used.

pub use tally_host_api::testing::MapHost;
