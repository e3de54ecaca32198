# cuDNN: the fused flash-attention engines the CUDA attention op runs under
# FAST numerics (src/backend/cuda/cuda_attention_cudnn.cu), linked into the
# CUDA backend module (libojas-cuda.so) from the CUDA toolkit's cudnn.h and
# libcudnn.so (cuDNN 9: the backend graph API). Without them the module
# builds with OJAS_HAVE_CUDNN=0 and attention stays on the tensor-core
# kernels ("cuDNN not built in").
if(TARGET ojas_cuda)
  find_path(OJAS_CUDNN_INCLUDE cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(OJAS_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
    HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(OJAS_CUDNN_INCLUDE AND OJAS_CUDNN_LIBRARY)
    target_include_directories(ojas_cuda PRIVATE ${OJAS_CUDNN_INCLUDE})
    target_link_libraries(ojas_cuda PRIVATE ${OJAS_CUDNN_LIBRARY})
    target_compile_definitions(ojas_cuda PRIVATE OJAS_HAVE_CUDNN=1)
    message(STATUS "ojas: cuDNN ${OJAS_CUDNN_LIBRARY}")
  else()
    target_compile_definitions(ojas_cuda PRIVATE OJAS_HAVE_CUDNN=0)
    message(STATUS "ojas: no cuDNN (cudnn_graph.h / libcudnn): attention runs the tensor-core kernels")
  endif()
endif()
