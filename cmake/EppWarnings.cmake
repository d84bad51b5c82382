# Warning flags for the project's own targets (not third-party code).
function(epp_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
  if(EPP_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
