// CPU threads of the "cpu" backend: how many threads OpenMP runs each of its parallel loops with.
// The library never reads the environment for it (OpenMP reads OMP_NUM_THREADS once, when its
// runtime starts, so a program that sets the variable later changes nothing); programs that take
// a thread count from their users pass it here.
#pragma once

namespace ding {

// Sets the thread count of later parallel loops started from the calling thread (the thread that
// runs the model). Call it before opening a cpu device: the device's Caps::compute_units and name
// record the count at open. Throws Error(invalid_argument) for n < 1, and
// Error(not_implemented) for n > 1 in a build without OpenMP.
void set_cpu_threads(int n);

// The thread count parallel loops started from the calling thread run with, as the OpenMP
// runtime reports it (1 in a build without OpenMP).
int cpu_threads();

}  // namespace ding
