//! The key sets of the moby API structs the gate judges, for
//! [`crate::lang::gojson`]: dockerd decodes request bodies with Go's
//! `encoding/json` (keys match case-insensitively, the last duplicate wins),
//! so a judged body is parsed with these schemas and refused when a key that
//! folds to one of these fields is not spelled exactly, or repeats.
//!
//! Only the fields the gate reads (and the structs above them) are listed: a
//! key that folds to a field not listed here is one the gate does not judge,
//! and is left to dockerd.

use crate::lang::gojson::Field;
use crate::lang::gojson::Kind::{self, Any, Leaf, List, Map, Struct};

const STRINGS: Kind = List(&Leaf);

/// `mount.Mount` (api/types/mount): `HostConfig.Mounts[]`.
const MOUNT: Kind = Struct(&[
    Field("Type", Leaf),
    Field("Source", Leaf),
    Field("Target", Leaf),
    Field("ReadOnly", Leaf),
    Field("Consistency", Leaf),
    Field(
        "BindOptions",
        Struct(&[
            Field("Propagation", Leaf),
            Field("NonRecursive", Leaf),
            Field("CreateMountpoint", Leaf),
            Field("ReadOnlyNonRecursive", Leaf),
            Field("ReadOnlyForceRecursive", Leaf),
        ]),
    ),
    Field(
        "VolumeOptions",
        Struct(&[
            Field("NoCopy", Leaf),
            Field("Labels", Map(&Leaf)),
            Field("Subpath", Leaf),
            Field(
                "DriverConfig",
                Struct(&[Field("Name", Leaf), Field("Options", Map(&Leaf))]),
            ),
        ]),
    ),
    // API >= 1.48 / 1.42: only the refused types `image` and `cluster`.
    Field("ImageOptions", Struct(&[Field("Subpath", Leaf)])),
    Field("ClusterOptions", Any),
    Field(
        "TmpfsOptions",
        Struct(&[
            Field("SizeBytes", Leaf),
            Field("Mode", Leaf),
            Field("Options", Any),
        ]),
    ),
]);

/// `container.LogConfig`.
const LOG_CONFIG: Kind = Struct(&[Field("Type", Leaf), Field("Config", Map(&Leaf))]);

/// `network.EndpointSettings`: only its driver options are judged.
const ENDPOINT_SETTINGS: Kind = Struct(&[Field("DriverOpts", Map(&Leaf))]);

/// `network.NetworkingConfig`: `POST /containers/create`'s NetworkingConfig.
const NETWORKING_CONFIG: Kind = Struct(&[Field("EndpointsConfig", Map(&ENDPOINT_SETTINGS))]);

/// `network.ConnectOptions` (20.10: `NetworkConnect`).
pub const NETWORK_CONNECT: &[Field] = &[
    Field("Container", Leaf),
    Field("EndpointConfig", ENDPOINT_SETTINGS),
];

/// The judged fields of `container.HostConfig`.
pub const HOST_CONFIG: &[Field] = &[
    Field("CgroupParent", Leaf),
    Field("Sysctls", Map(&Leaf)),
    Field("DeviceRequests", Any),
    Field("Annotations", Map(&Leaf)),
    Field("Binds", STRINGS),
    Field("Mounts", List(&MOUNT)),
    Field("Runtime", Leaf),
    Field("VolumesFrom", STRINGS),
    Field("VolumeDriver", Leaf),
    Field("LogConfig", LOG_CONFIG),
];

/// The body of `POST /containers/create`: moby 20.10's
/// `runconfig.ContainerConfigWrapper` embeds `*container.Config` AND a
/// deprecated `*container.HostConfig`, so every HostConfig field is also
/// read at the top level (used when `HostConfig` is absent). Both places are
/// judged. No `container.Config` field shares a name with these.
pub const CREATE: &[Field] = &[
    Field("CgroupParent", Leaf),
    Field("Sysctls", Map(&Leaf)),
    Field("NetworkingConfig", NETWORKING_CONFIG),
    Field("DeviceRequests", Any),
    Field("Annotations", Map(&Leaf)),
    Field("Binds", STRINGS),
    Field("Mounts", List(&MOUNT)),
    Field("Runtime", Leaf),
    Field("VolumesFrom", STRINGS),
    Field("VolumeDriver", Leaf),
    Field("LogConfig", LOG_CONFIG),
    Field("HostConfig", Struct(HOST_CONFIG)),
];

/// `volume.CreateOptions` (20.10: `VolumeCreateBody`): `POST /volumes/create`.
pub const VOLUME_CREATE: &[Field] = &[
    Field("Name", Leaf),
    Field("Driver", Leaf),
    Field("DriverOpts", Map(&Leaf)),
    Field("Labels", Map(&Leaf)),
    Field("ClusterVolumeSpec", Any),
];

/// `network.CreateRequest` (20.10: `NetworkCreateRequest`):
/// `POST /networks/create`. Every field of Docker 28.5's, so that a key
/// folding to any of them is read as dockerd reads it.
pub const NETWORK_CREATE: &[Field] = &[
    Field("Name", Leaf),
    Field("CheckDuplicate", Leaf),
    Field("Driver", Leaf),
    Field("Scope", Leaf),
    Field("EnableIPv4", Leaf),
    Field("EnableIPv6", Leaf),
    Field(
        "IPAM",
        Struct(&[
            Field("Driver", Leaf),
            Field("Config", Any),
            Field("Options", Map(&Leaf)),
        ]),
    ),
    Field("Internal", Leaf),
    Field("Attachable", Leaf),
    Field("Ingress", Leaf),
    Field("ConfigOnly", Leaf),
    Field("ConfigFrom", Any),
    Field("Options", Map(&Leaf)),
    Field("Labels", Map(&Leaf)),
];

pub static CREATE_KIND: Kind = Struct(CREATE);
pub static NETWORK_CREATE_KIND: Kind = Struct(NETWORK_CREATE);
pub static HOST_CONFIG_KIND: Kind = Struct(HOST_CONFIG);
pub static VOLUME_CREATE_KIND: Kind = Struct(VOLUME_CREATE);
pub static NETWORK_CONNECT_KIND: Kind = Struct(NETWORK_CONNECT);

#[cfg(test)]
mod tests {
    use super::*;

    /// The create body repeats HostConfig's judged fields at its top level
    /// (the embedded 20.10 HostConfig): a field added to one list only
    /// would go unjudged, for folding, in the other place.
    #[test]
    fn create_top_level_has_every_judged_host_config_field() {
        for Field(name, _) in HOST_CONFIG {
            assert!(
                CREATE.iter().any(|Field(n, _)| n == name),
                "{name} is judged in HostConfig but not at the create body's top level"
            );
        }
    }
}
