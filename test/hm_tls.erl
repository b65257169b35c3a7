%% @doc Certificates for TLS distribution in tests and benchmarks, made with `openssl' as the
%% guide's quick start shows ("On several hosts"): a CA, and for each node a key and a
%% certificate it signed naming the node's host, and the node's distribution option file
%% with verification on both sides.
%%
%% A certificate names its host in `subjectAltName' as a DNS name, and also as an IP address
%% when the host is one: the client side of TLS distribution checks the host part of the
%% node name it connects to against the certificate's DNS names, even when that host part
%% is an address.
-module(hm_tls).

-export([available/0, ca/2, certificate/4, optfile/3, dist_args/1, file/2]).

%% @doc Whether `openssl' is installed.
-spec available() -> boolean().
available() -> os:find_executable("openssl") =/= false.

%% @doc A CA in `Dir': `Name.key' and the self-signed `Name.pem'.
-spec ca(file:filename(), string()) -> ok.
ca(Dir, Name) ->
    ok = filelib:ensure_dir(file(Dir, "x")),
    openssl(Dir, ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                  "-nodes", "-days", "2", "-keyout", Name ++ ".key", "-out", Name ++ ".pem",
                  "-subj", "/CN=" ++ Name,
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign"]).

%% @doc Key `Name.key' and certificate `Name.pem' in `Dir' for `Host' (a host name or an IP
%% address), signed by CA `Ca' (made by {@link ca/2} in the same directory).
-spec certificate(file:filename(), string(), string(), string()) -> ok.
certificate(Dir, Name, Ca, Host) ->
    San = case inet:parse_address(Host) of
              {ok, _} -> "DNS:" ++ Host ++ ",IP:" ++ Host;
              {error, _} -> "DNS:" ++ Host
          end,
    Ext = file(Dir, Name ++ ".ext"),
    ok = file:write_file(Ext, ["subjectAltName=", San, "\n",
                               "basicConstraints=CA:FALSE\n",
                               "keyUsage=critical,digitalSignature\n",
                               "extendedKeyUsage=serverAuth,clientAuth\n"]),
    ok = openssl(Dir, ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes", "-keyout", Name ++ ".key", "-out", Name ++ ".csr",
                       "-subj", "/CN=" ++ Host]),
    openssl(Dir, ["x509", "-req", "-in", Name ++ ".csr", "-CA", Ca ++ ".pem",
                  "-CAkey", Ca ++ ".key", "-CAcreateserial", "-days", "2",
                  "-extfile", Ext, "-out", Name ++ ".pem"]).

%% @doc Write the distribution option file of the node whose certificate is `Name' (signed by
%% `Ca'): its certificate and key on both sides, `verify_peer' against the CA, and a server
%% side that refuses a client without a certificate. Returns the file's name.
-spec optfile(file:filename(), string(), string()) -> file:filename().
optfile(Dir, Name, Ca) ->
    Mine = [{certfile, file(Dir, Name ++ ".pem")}, {keyfile, file(Dir, Name ++ ".key")},
            {cacertfile, file(Dir, Ca ++ ".pem")}, {verify, verify_peer}],
    Opts = [{server, Mine ++ [{fail_if_no_peer_cert, true}]}, {client, Mine}],
    File = file(Dir, "ssl_dist_" ++ Name ++ ".conf"),
    ok = file:write_file(File, io_lib:format("~p.~n", [Opts])),
    File.

%% @doc The command-line arguments of a node that runs distribution over TLS with option
%% file `OptFile'.
-spec dist_args(file:filename()) -> [string()].
dist_args(OptFile) -> ["-proto_dist", "inet_tls", "-ssl_dist_optfile", OptFile].

%% @doc `Name' in `Dir'.
-spec file(file:filename(), string()) -> file:filename().
file(Dir, Name) -> filename:join(Dir, Name).

openssl(Dir, Args) ->
    Port = open_port({spawn_executable, os:find_executable("openssl")},
                     [{args, Args}, {cd, Dir}, exit_status, stderr_to_stdout, binary]),
    openssl_result(Port, Args, <<>>).

openssl_result(Port, Args, Out) ->
    receive
        {Port, {data, D}} -> openssl_result(Port, Args, <<Out/binary, D/binary>>);
        {Port, {exit_status, 0}} -> ok;
        {Port, {exit_status, St}} -> error({openssl, Args, St, Out})
    end.
