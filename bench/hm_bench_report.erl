%% @doc Where a `make bench' run goes: the generated section of REPORT.md for its profile
%% (older runs' files pruned), its PNG plots (gnuplot), and the terms of its JSON record.
-module(hm_bench_report).

-export([profile_title/1, json_term/1, update_report/2, plots/2, out_dirs/1]).

-import(hm_bench_lib, [key/1, ctx_name/1, utf8/1, contexts/0]).

-include("hm_bench.hrl").

%% @doc (results directory, report file): bench/ for real runs, _build/bench/ for scaled ones
-spec out_dirs(number()) -> {Results :: file:filename(), Report :: file:filename()}.
out_dirs(S) when S == 1 -> {"bench/results", "bench/REPORT.md"};
out_dirs(_) ->
    Build = build_dir(),
    {filename:join(Build, "results"), filename:join(Build, "REPORT.md")}.

build_dir() -> filename:dirname(code:which(?MODULE)).

%% @doc REPORT.md: replace this profile's generated section (between its markers), or append one;
%% everything outside the markers is hand-written and kept as it is
-spec update_report(string(), map()) -> ok.
update_report(Base, Out) ->
    {_, File} = out_dirs(maps:get(scale, Out, 1)),
    Old = case file:read_file(File) of
              {ok, B} -> B;
              {error, enoent} -> case file:read_file("bench/REPORT.md") of
                                     {ok, B} -> B;
                                     _ -> <<>>
                                 end
          end,
    Prof = binary_to_list(maps:get(profile, Out)),
    %% the markers count only at the start of a line, so the text may mention them
    Begin = "\n<!-- BEGIN GENERATED " ++ Prof,
    End = "\n<!-- END GENERATED " ++ Prof ++ " -->",
    Section = [Begin, ": hm_bench writes this part from the run; edit outside the markers -->\n",
               report_md(Out, "results/"), End],
    New = case binary:split(Old, list_to_binary(Begin)) of
              [Pre, Rest] -> case binary:split(Rest, list_to_binary(End)) of
                                 [_, Post] -> [Pre, Section, Post];
                                 [_] -> erlang:error({no_end_marker, File, Prof})
                             end;
              [_] -> [Old, Section, "\n"]
          end,
    Bin = utf8(New),
    ok = file:write_file(File, Bin),
    io:format("updated ~s (generated section ~s)~n", [File, Prof]),
    prune(filename:dirname(Base), Prof, binary_to_list(maps:get(run_id, Out)), Bin).

%% The report's generated section, kept short: the run's head (run, machine, profile, files)
%% and its targets table; the run's own .md has every table, the why included.
report_md(Out, Rel) ->
    Id = maps:get(run_id, Out, <<"(unknown run)">>),
    Md = utf8(hm_bench_md:figures_md(Out, Rel)),
    [Head, Rest] = binary:split(Md, <<"\n#### Ratios">>),
    [_, Targets0] = binary:split(Rest, <<"\n#### Targets">>),
    [Targets | _] = binary:split(Targets0, [<<"\n#### Why">>,
                                            <<"\n#### Throughput and latency">>]),
    [Head, "\n#### Targets", Targets,
     io_lib:format("~nRatios, why each target is met or missed, and every other table of the "
                   "run: [~s.md](~s~s.md).~n", [Id, Rel, Id])].

%% delete this profile's older runs from the results unless the hand-written part of the
%% report (outside the generated sections) mentions them
prune(Dir, Prof, Keep, Report) ->
    Hand = re:replace(Report, "^<!-- BEGIN GENERATED.*?^<!-- END GENERATED[^>]*-->", "",
                      [global, dotall, multiline, {return, binary}]),
    Ids = lists:usort([Id || F <- filelib:wildcard(Prof ++ "-*", Dir),
                             {match, [Id]} <- [re:run(F, "^([a-z]+-[0-9]{8}-[0-9]{4})",
                                                      [{capture, all_but_first, list}])]]),
    Stale = [Id || Id <- Ids, Id =/= Keep, binary:match(Hand, list_to_binary(Id)) =:= nomatch],
    _ = [begin
             io:format("removing the stale ~s~n", [F]),
             ok = file:delete(filename:join(Dir, F))
         end || Id <- Stale, F <- filelib:wildcard(Id ++ ".*", Dir) ++
                    filelib:wildcard(Id ++ "-*", Dir)],
    ok.

%%% ============================================================= plots (gnuplot)

%% @doc the .dat and .gp inputs of gnuplot are byproducts: they go to _build/bench/plot/
-spec plots(string(), map()) -> ok.
plots(Base, #{points := Pts, timelines := TLs} = Out) ->
    Tmp = filename:join([build_dir(), "plot", filename:basename(Base)]),
    ok = filelib:ensure_dir(Tmp),
    Dat = Tmp ++ "-points.dat",
    ok = file:write_file(Dat, [io_lib:format("~s/g~w ~.1f ~.1f ~w ~w ~w~n",
                                             [N, maps:get(gens_per_node, X),
                                              float(maps:get(throughput_ops_s, X)),
                                              float(maps:get(mean_us, L, 0)), maps:get(p50_us, L, 0),
                                              maps:get(p95_us, L, 0), maps:get(p99_us, L, 0)])
                               || X = #{context := N, latency := L} <- Pts]),
    TDat = Tmp ++ "-timeline.dat",
    Good = [T || T = #{per_sec := _} <- TLs],
    Secs = case Good of [] -> 0; [#{per_sec := PS} | _] -> length(PS) end,
    ok = file:write_file(TDat, [[io_lib:format("~w", [S]),
                                 [io_lib:format(" ~w", [lists:nth(S + 1, maps:get(per_sec, T))])
                                  || T <- Good], "\n"]
                                || S <- lists:seq(0, Secs - 1)]),
    Part = case Good of [#{partition_s := [F, To]} | _] -> {F, To}; _ -> {0, 0} end,
    %% a sweep-only run has no base points or timelines: plot only what exists
    Gp = [[[term(Base ++ "-throughput.png"),
          "set title 'Throughput per context (/gN = N generators per node)'\n",
          "set xlabel '", profile_title(Out), "'\n",
          "set style fill solid 0.6\nset boxwidth 0.6\nset ylabel 'ops/s (all nodes)'\n",
          "set xtics rotate by -20\nset yrange [0:*]\n",
          "plot '", Dat, "' using 0:2:xtic(1) with boxes notitle\n",
          term(Base ++ "-latency.png"),
          "set title 'Latency per context (/gN = N generators per node)'\nset ylabel 'microseconds'\nset logscale y\n",
          "set style data histogram\nset style histogram cluster gap 1\nset yrange [*:*]\n",
          "plot '", Dat, "' using 4:xtic(1) title 'p50', '' using 5 title 'p95', "
          "'' using 6 title 'p99', '' using 3 title 'mean'\n",
          "unset logscale y\nset style data lines\n"] || Pts =/= []],
          [[term(Base ++ "-timeline.png"),
          io_lib:format("set title 'Throughput per second, real partition of the last node "
                        "from ~w s to ~w s'\n", [element(1, Part), element(2, Part)]),
          io_lib:format("set object 1 rect from ~w, graph 0 to ~w, graph 1 fc rgb '#eeeeee' "
                        "behind\n", [element(1, Part), element(2, Part)]),
          "set xlabel 'seconds'\nset ylabel 'ops/s (all nodes)'\nset xtics auto rotate by 0\n"
          "set yrange [0:*]\n",
          "plot ", lists:join(", ", [io_lib:format("'~s' using 1:~w with linespoints title '~s'",
                                                   [TDat, I + 1, N])
                                     || {I, #{context := N}} <- lists:zip(lists:seq(1, length(Good)), Good)]),
          "\nunset object 1\n"] || Good =/= []],
          sweep_plots(Base, Tmp, maps:get(sweeps, Out, []))],
    GpFile = Tmp ++ ".gp",
    ok = file:write_file(GpFile, Gp),
    case os:find_executable("gnuplot") of
        false -> io:format("gnuplot not found: no PNGs~n");
        G -> io:format("~s", [os:cmd(G ++ " " ++ GpFile ++ " 2>&1")])
    end,
    ok.

term(Png) -> ["set terminal pngcairo size 900,500 noenhanced\nset output '", Png, "'\n"].

%% @doc A run's configuration in one line, the plots' and the Markdown's title.
-spec profile_title(map()) -> iodata().
profile_title(#{config := Cfg}) ->
    io_lib:format("~w nodes, ~w generators/node, ~w subscribers, ~w% reads, ~s",
                  [maps:get(nodes, Cfg), maps:get(gens, Cfg), maps:get(subs, Cfg),
                   maps:get(read_pct, Cfg), maps:get(storage, Cfg)]).

sweep_plots(Base, Tmp, Sweeps) ->
    [begin
         Dat = lists:concat([Tmp, "-sweep-", K, ".dat"]),
         Ctxs = [ctx_name(C) || C <- contexts()],
         Vals = maps:get(values, S),
         Tp = fun(V, Cx) -> hd([maps:get(throughput_ops_s, X) || X = #{value := V1, context := C1}
                                                                  <- maps:get(points, S),
                                                              V1 =:= V, C1 =:= Cx] ++ [0]) end,
         ok = file:write_file(Dat, [[io_lib:format("~p", [V]), [io_lib:format(" ~.1f", [float(Tp(V, Cx))]) || Cx <- Ctxs], "\n"]
                                    || V <- Vals]),
         [term(lists:concat([Base, "-sweep-", K, ".png"])),
          io_lib:format("set title 'Throughput vs ~s'\nset xlabel '~s'\n", [K, K]),
          "set ylabel 'ops/s'\nset yrange [0:*]\nunset object 1\nset style data histogram\n",
          "plot ", lists:join(", ", [io_lib:format("'~s' using ~w:xtic(1) title '~s'", [Dat, I + 1, Cx])
                                     || {I, Cx} <- lists:zip(lists:seq(1, length(Ctxs)), Ctxs)]),
          "\nset style data lines\n"]
     end || S = #{param := K} <- Sweeps].

%%% ============================================================= JSON

%% @doc The run's record as hm_json encodes it, in the record's own conventions: floats to three
%% decimals, tuples and `undefined' as the text `~0p' prints, map keys other than atoms,
%% integers and binaries too.
-spec json_term(term()) -> term().
json_term(M) when is_map(M) ->
    maps:from_list([{json_key(K), json_term(V)} || {K, V} <- maps:to_list(M)]);
json_term(L) when is_list(L) -> [json_term(X) || X <- L];
json_term(F) when is_float(F) -> list_to_float(lists:flatten(io_lib:format("~.3f", [F])));
json_term(undefined) -> <<"undefined">>;
json_term(T) when is_tuple(T) -> key(T);
json_term(X) -> X.

json_key(K) when is_atom(K); is_integer(K); is_binary(K) -> K;
json_key(K) -> key(K).
