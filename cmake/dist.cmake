# Data-parallel training (src/dist, docs/distributed.md).
# MPI: process groups from mpirun/srun and the CPU collectives. OJAS_MPI is
# ON when an MPI C library is found (Debian: libopenmpi-dev); OFF builds a
# libojas whose process group is always of one, and which refuses to run
# under an MPI launcher. libojas links MPI itself (a program that never runs
# under mpirun only loads it and never calls MPI_Init).
find_package(MPI COMPONENTS C QUIET)
option(OJAS_MPI "Link MPI for multi-process data-parallel training (src/dist)" ${MPI_C_FOUND})
if(OJAS_MPI)
  if(NOT MPI_C_FOUND)
    message(FATAL_ERROR "OJAS_MPI=ON but no MPI C library was found (install libopenmpi-dev)")
  endif()
  # no public header includes mpi.h: only libojas's own objects see it
  target_link_libraries(ojas_obj PRIVATE MPI::MPI_C)
  target_compile_definitions(ojas_obj PRIVATE OJAS_HAVE_MPI=1)
  target_link_libraries(ojas_shared PRIVATE MPI::MPI_C)
  target_link_libraries(ojas_static PUBLIC MPI::MPI_C) # libojas.a's users link it
  # what a static link of libojas.a needs (ojas-static.pc)
  set(OJAS_MPI_PC_LIBS "")
  foreach(lib ${MPI_C_LIBRARIES})
    string(APPEND OJAS_MPI_PC_LIBS " ${lib}")
  endforeach()
endif()
message(STATUS "ojas: MPI ${OJAS_MPI} (${MPIEXEC_EXECUTABLE})")

# NCCL: the CUDA engines' collectives, linked into the CUDA backend module
# (libojas-cuda.so) from the CUDA toolkit's nccl.h and libnccl.so.2.
if(TARGET ojas_cuda)
  find_path(OJAS_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(OJAS_NCCL_LIBRARY NAMES nccl libnccl.so.2
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(OJAS_NCCL_INCLUDE AND OJAS_NCCL_LIBRARY)
    target_include_directories(ojas_cuda PRIVATE ${OJAS_NCCL_INCLUDE})
    target_link_libraries(ojas_cuda PRIVATE ${OJAS_NCCL_LIBRARY})
    target_compile_definitions(ojas_cuda PRIVATE OJAS_HAVE_NCCL=1)
    message(STATUS "ojas: NCCL ${OJAS_NCCL_LIBRARY}")
  else()
    message(STATUS "ojas: no NCCL (nccl.h / libnccl): CUDA engines cannot run distributed")
  endif()
endif()

# The multi-process trainer tests run `mpirun -np 2 ojas train` (CPU) and
# `mpirun -np 1 ojas train --device cuda` (tests/gpu: the NCCL path).
foreach(t test_dist_train test_gpu_dist)
  if(OJAS_TESTS AND TARGET ${t})
    add_dependencies(${t} ojas_cli)
    if(OJAS_MPI AND MPIEXEC_EXECUTABLE)
      target_compile_definitions(${t} PRIVATE OJAS_MPIEXEC="${MPIEXEC_EXECUTABLE}")
    endif()
    set_tests_properties(${t} PROPERTIES TIMEOUT 300)
  endif()
endforeach()
