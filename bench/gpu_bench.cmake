# bench/gpu/gpu_bench: the GPU's copy and bf16 GEMM ceilings and each CUDA kernel's
# time against its floor at GPT-2 124M shapes, and cuBLASLt's candidates for each of
# atoll's GEMMs against the heuristic's first choice (bench/gpu/run.sh runs it).
if(TARGET atoll_cuda)
  add_executable(gpu_bench ${CMAKE_CURRENT_LIST_DIR}/gpu/gpu_bench.c ${CMAKE_CURRENT_LIST_DIR}/gpu/gemm_sweep.c)
  target_include_directories(gpu_bench PRIVATE ${CMAKE_SOURCE_DIR}/kernels/cuda)
  target_link_libraries(gpu_bench PRIVATE atoll_cuda atoll_kernels_cpu CUDA::cudart CUDA::cublas CUDA::cublasLt)
  # its own copy of cudnn_sdpa.c: each of cuDNN's attention engine configs timed one by one
  if(ATOLL_CUDNN_INCLUDE)
    target_sources(gpu_bench PRIVATE ${CMAKE_SOURCE_DIR}/kernels/cuda/cudnn_sdpa.c)
    target_include_directories(gpu_bench PRIVATE ${ATOLL_CUDNN_INCLUDE})
    target_compile_definitions(gpu_bench PRIVATE ATOLL_HAVE_CUDNN=1)
    target_link_libraries(gpu_bench PRIVATE ${CMAKE_DL_LIBS} m)
  endif()
endif()
