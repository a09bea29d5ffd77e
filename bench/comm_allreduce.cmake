# bench/comm_allreduce: host-transport all-reduce bus bandwidth on loopback.
if(TARGET atoll_par)
  add_executable(comm_allreduce ${CMAKE_CURRENT_LIST_DIR}/comm_allreduce.c)
  target_link_libraries(comm_allreduce PRIVATE atoll_par)
endif()
