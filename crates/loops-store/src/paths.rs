pub const DB_FILE: &str = "loops.db";
pub fn data_dir() {}
pub fn prepare_data_dir() {}
