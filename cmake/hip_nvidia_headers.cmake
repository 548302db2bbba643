# HIP's NVIDIA platform headers, made to compile against CUDA 13, in the build tree.
#   cmake -DSOURCE=/usr/include/hip -DDEST=<build>/hip-nvidia/include/hip -P cmake/hip_nvidia_headers.cmake
#
# Debian's libamdhip64-dev (HIP 5.2.3) ships the headers that map the HIP API onto CUDA
# (hip/nvidia_detail/), written for CUDA 11. CUDA 12 and 13 removed or changed what some of
# their inline wrappers call: texture references, several cudaDeviceProp fields, the
# multi-device cooperative launch, and the signatures of cudaMemAdvise / cudaMemPrefetchAsync
# (a cudaMemLocation), cuCtxCreate (a CUctxCreateParams*), the graph edge queries (edge data) and
# stream capture info. This script copies the installed headers (the repository holds no copy of
# them) and puts each of those wrappers behind `#if CUDART_VERSION >= 13000`: the CUDA 13 form
# where the API still exists, hipErrorNotSupported where it is gone. The original text stays in
# the #else branch. Two slips of the header itself are fixed on the way (a version macro defined
# twice under one name, a wrapper without its return). Every edit must match exactly as often as expected, so a different header
# version stops here with the edit named instead of compiling into something unknown.
cmake_minimum_required(VERSION 3.25)
if(NOT SOURCE OR NOT DEST)
  message(FATAL_ERROR "hip_nvidia_headers.cmake: pass -DSOURCE=<installed hip include dir> -DDEST=<output dir>")
endif()
set(header_name nvidia_detail/nvidia_hip_runtime_api.h)
if(NOT EXISTS "${SOURCE}/${header_name}")
  message(FATAL_ERROR "hip_nvidia_headers.cmake: ${SOURCE}/${header_name} is missing (apt-get install libamdhip64-dev)")
endif()
file(REMOVE_RECURSE "${DEST}")
file(COPY "${SOURCE}/" DESTINATION "${DEST}")
file(READ "${DEST}/${header_name}" text)

# How many times `needle` occurs in `haystack`.
function(occurrences haystack needle out)
  string(LENGTH "${haystack}" before)
  string(REPLACE "${needle}" "" stripped "${haystack}")
  string(LENGTH "${stripped}" after)
  string(LENGTH "${needle}" size)
  math(EXPR n "(${before} - ${after}) / ${size}")
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# Every occurrence of `old` becomes `new`; there must be `expected` of them.
function(fix name expected old new)
  occurrences("${text}" "${old}" n)
  if(NOT n EQUAL expected)
    message(FATAL_ERROR "hip_nvidia_headers.cmake: edit '${name}' expects ${expected} match(es) in ${header_name}, found ${n}")
  endif()
  string(REPLACE "${old}" "${new}" patched "${text}")
  set(text "${patched}" PARENT_SCOPE)
endfunction()

# As fix, for whole lines that CUDA 13 broke: `new` (empty: nothing) under CUDA 13, `old` before.
function(guard name expected old new)
  fix(${name} ${expected} "${old}" "#if CUDART_VERSION >= 13000\n${new}#else\n${old}#endif\n")
  set(text "${text}" PARENT_SCOPE)
endfunction()

# Slips in the header itself, whatever the CUDA version.
fix(version-macro 1 "#define CUDA_11010 11020\n" "#define CUDA_11020 11020\n")
fix(tex-ref-return 1 "    hipCUResultTohipError(cuModuleGetTexRef(pTexRef, hmod, name));\n"
    "    return hipCUResultTohipError(cuModuleGetTexRef(pTexRef, hmod, name));\n")

set(not_supported "    return hipErrorNotSupported;\n")
# The device argument of the CUDA 11 calls as the location CUDA 13 takes.
set(location [=[    cudaMemLocation location{};
    location.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    location.id = device;
]=])

guard(mem-advise 1 [=[    return hipCUDAErrorTohipError(cudaMemAdvise(dev_ptr, count,
        hipMemoryAdviseTocudaMemoryAdvise(advice), device));
]=] "${location}    return hipCUDAErrorTohipError(cudaMemAdvise(dev_ptr, count, hipMemoryAdviseTocudaMemoryAdvise(advice), location));\n")
guard(mem-prefetch 1 [=[    return hipCUDAErrorTohipError(cudaMemPrefetchAsync(dev_ptr, count, device, stream));
]=] "${location}    return hipCUDAErrorTohipError(cudaMemPrefetchAsync(dev_ptr, count, location, 0, stream));\n")

# hipChooseDevice: fields cudaDeviceProp no longer has are not matched on.
foreach(field clockRate computeMode memoryClockRate)
  guard(choose-${field} 1 "    cdprop.${field} = prop->${field};\n" "")
endforeach()
# hipGetDeviceProperties: the same fields as device attributes.
foreach(pair "clockRate=ClockRate" "memoryClockRate=MemoryClockRate" "computeMode=ComputeMode"
             "kernelExecTimeoutEnabled=KernelExecTimeout")
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 field)
  list(GET pair 1 attribute)
  string(REGEX MATCH "\n    p_prop->${field} *= cdprop.${field};\n" line "${text}")
  if(NOT line)
    message(FATAL_ERROR "hip_nvidia_headers.cmake: edit 'properties-${field}' found no assignment of ${field}")
  endif()
  string(SUBSTRING "${line}" 1 -1 line)
  guard(properties-${field} 1 "${line}"
        "    { int value = 0; cudaDeviceGetAttribute(&value, cudaDevAttr${attribute}, device); p_prop->${field} = value; }\n")
endforeach()
guard(properties-clock-instruction-rate 1 "    p_prop->clockInstructionRate = cdprop.clockRate; // Same as clock-rate:\n"
      "    p_prop->clockInstructionRate = p_prop->clockRate;\n")
guard(properties-multi-device 1 "    p_prop->cooperativeMultiDeviceLaunch = cdprop.cooperativeMultiDeviceLaunch;\n"
      "    p_prop->cooperativeMultiDeviceLaunch = 0;\n")
guard(attribute-multi-device 1 "            cdattr = cudaDevAttrCooperativeMultiDeviceLaunch;\n" "            return hipErrorNotSupported;\n")
guard(ctx-create 1 "    return hipCUResultTohipError(cuCtxCreate(ctx, flags, device));\n"
      "    return hipCUResultTohipError(cuCtxCreate(ctx, nullptr, flags, device));\n")

# Texture references and the multi-device cooperative launch are gone.
guard(bind-texture 2 "    return hipCUDAErrorTohipError(cudaBindTexture(offset, tex, devPtr, desc, size));\n" "${not_supported}")
guard(bind-texture-2d 1 "    return hipCUDAErrorTohipError(cudaBindTexture2D(offset, tex, devPtr, desc, width, height, pitch));\n"
      "${not_supported}")
guard(texture-alignment 1 "    return hipCUDAErrorTohipError(cudaGetTextureAlignmentOffset(offset,texref));\n" "${not_supported}")
guard(multi-device-launch 1
      "    return hipCUDAErrorTohipError(cudaLaunchCooperativeKernelMultiDevice(launchParamsList, numDevices, flags));\n"
      "${not_supported}")
# The templates over texture<T, dim, readMode>: from the first to the end of the last, as a block.
set(first "template <class T, int dim, enum cudaTextureReadMode readMode>\ninline static hipError_t hipBindTexture(")
set(last_call "    return hipCUDAErrorTohipError(cudaBindTextureToArray(tex, array));\n}\n")
string(FIND "${text}" "${first}" begin)
string(FIND "${text}" "${last_call}" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "hip_nvidia_headers.cmake: edit 'texture-templates' did not find its block")
endif()
string(LENGTH "${last_call}" last_size)
math(EXPR block_size "${end} + ${last_size} - ${begin}")
string(SUBSTRING "${text}" ${begin} ${block_size} block)
guard(texture-templates 1 "${block}" "")

# Graph edges and capture dependencies carry edge data now (none here).
guard(graph-add-dependencies 1 "    return hipCUDAErrorTohipError(cudaGraphAddDependencies(graph, from, to, numDependencies));\n"
      "    return hipCUDAErrorTohipError(cudaGraphAddDependencies(graph, from, to, nullptr, numDependencies));\n")
guard(graph-remove-dependencies 1 "    return hipCUDAErrorTohipError(cudaGraphRemoveDependencies(graph, from, to, numDependencies));\n"
      "    return hipCUDAErrorTohipError(cudaGraphRemoveDependencies(graph, from, to, nullptr, numDependencies));\n")
guard(graph-edges 1 "    return hipCUDAErrorTohipError(cudaGraphGetEdges(graph, from, to, numEdges));\n"
      "    return hipCUDAErrorTohipError(cudaGraphGetEdges(graph, from, to, nullptr, numEdges));\n")
guard(node-dependencies 1 "        cudaGraphNodeGetDependencies(node, pDependencies, pNumDependencies));\n"
      "        cudaGraphNodeGetDependencies(node, pDependencies, nullptr, pNumDependencies));\n")
guard(node-dependents 1 "        cudaGraphNodeGetDependentNodes(node, pDependentNodes, pNumDependentNodes));\n"
      "        cudaGraphNodeGetDependentNodes(node, pDependentNodes, nullptr, pNumDependentNodes));\n")
guard(capture-info 1 [=[    return hipCUDAErrorTohipError(cudaStreamGetCaptureInfo_v2(
        stream, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out));
]=] [=[    return hipCUDAErrorTohipError(cudaStreamGetCaptureInfo(
        stream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr, numDependencies_out));
]=])
guard(update-capture-dependencies 1 [=[    return hipCUDAErrorTohipError(cudaStreamUpdateCaptureDependencies(stream, dependencies,
                                                                      numDependencies, flags));
]=] [=[    return hipCUDAErrorTohipError(cudaStreamUpdateCaptureDependencies(stream, dependencies, nullptr,
                                                                      numDependencies, flags));
]=])

file(WRITE "${DEST}/${header_name}" "${text}")
