"""The store itself: writing, reading, property tests, threads and processes, scale, and the
package's own imports and stubs."""
