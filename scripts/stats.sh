# Shared by the measuring scripts (source it): summary statistics of numbers on stdin.

# Prints "min median max" of the numbers on stdin, one per line, to 3 decimals.
median() {
    sort -g | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3f %.3f %.3f", v[1], m, v[NR] }'
}
