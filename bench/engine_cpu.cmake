# bench/engine_cpu: CPU training throughput of a 4-layer, hidden-256 GPT against
# the machine's CBLAS SGEMM rate measured in the same run.
if(TARGET atoll_engine)
  add_executable(engine_cpu ${CMAKE_CURRENT_LIST_DIR}/engine_cpu.c)
  target_link_libraries(engine_cpu PRIVATE atoll_engine)
endif()
