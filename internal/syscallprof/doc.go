// Package syscallprof reads system-call profiles: the summary table that
// `strace -c` prints when the traced program exits (also with -f, -w, -S,
// -U and -C), as in the Ozone investigations of seed 000:
//
//	% time     seconds  usecs/call     calls    errors syscall
//	------ ----------- ----------- --------- --------- ----------------
//	 96.70 6831.961434        6243   1094305    131769 futex
//	  1.99  140.720842        4265     32992           epoll_wait
//	...
//	------ ----------- ----------- --------- --------- ----------------
//	100.00 7064.807148               2727877    257953 total
//
// What it tolerates:
//   - any lines before and after a table (the traced program's output, the
//     trace itself with -C, "strace: Process N detached");
//   - a truncated table: rows missing, marked by a line of dots or not; the
//     printed total line stays authoritative (Profile.Total) and the sum of
//     the rows that are present is reported beside it (Profile.Rows,
//     Profile.RowsMatchTotal);
//   - blank cells: the errors column is empty when a syscall never failed,
//     and older strace versions leave usecs/call empty on the total line;
//   - the column layouts of old and new strace, including -U column
//     selections and orderings ("syscall calls errors seconds usecs/call
//     shortest longest % time"): columns are found from the header and the
//     dashed separator under it, and blank cells are placed by alignment
//     with the separator (a table needs at least the calls and syscall
//     columns);
//   - several tables in one input (strace prints one per personality, e.g.
//     "System call usage summary for 32 bit mode:"): Parse merges them,
//     ParseTables returns them one by one.
//
// A table cannot tell whether -w (wall clock) was given, nor whether -f
// was; Profile.Tool says "strace -c" and callers record the rest.
//
// Invariants of a Profile returned without error:
//   - Rows is exactly the sum of Syscalls' counts; Total is the printed total
//     line, or equal to Rows when the table had none (HasTotalLine false);
//   - every count is >= 0 and every time is finite and >= 0;
//   - Syscalls are in printed order and names are unique;
//   - len(Syscalls) <= MaxSyscallsPerTable × Tables, Tables <= MaxTables.
//
// Parsing never panics on any input (a fuzz target checks this) and is
// bounded by the input: one pass, lines longer than MaxLineBytes are noise
// outside a table and an error inside one.
//
// Tests that run a live strace end through NoStrace when this machine has
// none that may trace: a skip, or a failure under SPINDLE_REQUIRE_STRACE=1
// (as CI runs them).
//
// Concurrency: functions are pure (NoStrace reads the environment); a
// Profile is a plain value, safe to share once returned.
package syscallprof
