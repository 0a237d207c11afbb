pub mod container_id;
