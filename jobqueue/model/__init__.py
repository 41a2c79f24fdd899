"""The vocabulary: jobs, queues, workers, circuits, limits, schedules, cron, retries, names, errors.

Plain values and the rules that check them, with no I/O and no import of jobqueue outside this
package (an import-linter contract), so every other room can use them.
"""
