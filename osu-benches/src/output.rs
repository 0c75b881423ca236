//! OSU 7.4's output, to the character: a blank line, the title with the version, the datatype,
//! then a column header and rows of `%-10d%18.2f`.

use crate::options::Benchmark;

const SIZE_WIDTH: usize = 10;
const FIELD_WIDTH: usize = 18;
const FLOAT_PRECISION: usize = 2;

pub fn header(b: Benchmark) -> String {
    format!(
        "\n# {} v7.4\n# Datatype: MPI_CHAR.\n{:<SIZE_WIDTH$}{:>FIELD_WIDTH$}\n",
        b.title(),
        "# Size",
        b.column()
    )
}

pub fn row(size: usize, value: f64) -> String {
    format!("{size:<SIZE_WIDTH$}{value:>FIELD_WIDTH$.FLOAT_PRECISION$}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_osu() {
        assert_eq!(
            header(Benchmark::Latency),
            "\n# OSU MPI Latency Test v7.4\n# Datatype: MPI_CHAR.\n# Size       Avg Latency(us)\n"
        );
        assert_eq!(
            header(Benchmark::Bandwidth),
            "\n# OSU MPI Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n"
        );
        assert_eq!(
            header(Benchmark::BiBandwidth),
            "\n# OSU MPI Bi-Directional Bandwidth Test v7.4\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n"
        );
    }

    #[test]
    fn rows_are_left_size_right_value() {
        assert_eq!(row(0, 0.2149), "0                       0.21\n");
        assert_eq!(row(4194304, 12345.678), "4194304             12345.68\n");
    }
}
